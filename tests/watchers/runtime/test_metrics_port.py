"""The runtime watcher's metrics port serves prometheus_client's exposition: the format the
scraper asks for (OpenMetrics or text), gzip when accepted, and the probes' answers as before."""

from __future__ import annotations

import gzip
import urllib.error
import urllib.request

import pytest

from watchers.runtime import WatcherServer


def get(watcher: WatcherServer, path: str, **headers: str) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(f"http://127.0.0.1:{watcher.metrics_port}{path}", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def test_given_a_scraper_asking_for_openmetrics_when_scraping_then_openmetrics(watcher):
    status, headers, body = get(watcher, "/metrics", Accept="application/openmetrics-text; version=1.0.0")
    assert status == 200
    assert headers["Content-Type"].startswith("application/openmetrics-text")
    assert body.endswith(b"# EOF\n")
    assert b"watcher_admission_request_total 0.0" in body


def test_given_a_scraper_accepting_gzip_when_scraping_then_the_body_is_compressed(watcher):
    status, headers, body = get(watcher, "/metrics", **{"Accept-Encoding": "gzip"})
    assert (status, headers["Content-Encoding"]) == (200, "gzip")
    assert b"watcher_send_queue_depth" in gzip.decompress(body)


def test_given_no_preference_when_scraping_then_the_classic_text_format(watcher):
    status, headers, body = get(watcher, "/metrics")
    assert status == 200
    assert headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert b"# TYPE watcher_admission_request_total counter" in body


@pytest.mark.parametrize("path", ["/healthz", "/readyz"])
def test_probes_answer_plain_ok(watcher, path):
    assert get(watcher, path)[0::2] == (200, b"ok\n")


def test_given_an_unknown_path_then_404(watcher):
    assert get(watcher, "/nothing")[0::2] == (404, b"not found; try /metrics or /healthz\n")
