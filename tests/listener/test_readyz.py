"""The listener's plain-HTTP side port answers /readyz like the web role does: 200 when the
database, the broker and the TLS material it serves with are usable and a worker has loaded the
app, 503 naming what is not."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from wsgiref.util import setup_testing_defaults

import pytest
from django.db import connections

from listener import metrics_server
from listener.readiness import worker_gone, worker_serving, workers_reset
from listener.tls import write_material
from tests.support.listener import start_listener
from tests.support.processes import free_port

pytestmark = pytest.mark.django_db


def call(path: str) -> tuple[int, dict[str, str], bytes]:
    """One request to the side port's WSGI app, in this process."""
    environ: dict = {}
    setup_testing_defaults(environ)
    environ["PATH_INFO"] = path
    answer: dict = {}

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: object = None) -> None:
        answer.update(status=int(status.split()[0]), headers=dict(headers))

    body = b"".join(metrics_server.app(environ, start_response))
    return answer["status"], answer["headers"], body


def readyz() -> tuple[int, dict]:
    status, headers, body = call("/readyz")
    assert headers["Content-Type"] == "application/json"
    return status, json.loads(body)


@pytest.fixture
def direct_mode(settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The listener ends TLS itself with the files ``serve listener`` wrote (as in production)."""
    settings.LISTENER_MODE = "direct"
    paths = write_material(tmp_path / "listener-tls")
    for name, path in paths.items():
        monkeypatch.setenv(name, path)
    return paths


@pytest.fixture(autouse=True)
def worker_serves(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """As under ``serve listener``: the metrics directory, where a worker that loaded the app
    (here: this process) left its marker."""
    directory = tmp_path / "prometheus"
    directory.mkdir()
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(directory))
    worker_serving(os.getpid())
    return directory


@pytest.fixture
def database_down() -> Iterator[None]:
    """New connections to the default database go where no database is (a missing directory for
    SQLite, a closed port for PostgreSQL); the open connection of the test itself stays usable."""
    settings_dict = connections.settings["default"]
    saved = dict(settings_dict)
    if settings_dict["ENGINE"].endswith("sqlite3"):
        settings_dict["NAME"] = str(Path("/nonexistent-controlplane-db") / "db.sqlite3")
    else:
        settings_dict.update(HOST="127.0.0.1", PORT=str(free_port()))
    yield
    settings_dict.clear()
    settings_dict.update(saved)


def test_given_database_broker_and_tls_material_usable_when_readyz_then_200_with_every_check(direct_mode):
    status, body = readyz()
    assert status == 200
    assert body["status"] == "ok"
    assert body["checks"] == {"database": "ok", "broker": "ok", "workers": "ok", "tls": "ok"}


def test_given_the_database_unreachable_when_readyz_then_503_names_the_database(direct_mode, database_down):
    status, body = readyz()
    assert status == 503
    assert body["status"] == "unavailable"
    assert body["checks"]["database"].startswith("database unreachable")
    assert body["checks"]["broker"] == body["checks"]["tls"] == "ok"


def test_given_the_broker_unreachable_when_readyz_then_503_names_the_broker(direct_mode, broker_down):
    status, body = readyz()
    assert status == 503
    assert body["checks"]["broker"].startswith("broker unreachable")
    assert body["checks"]["database"] == body["checks"]["tls"] == "ok"


def test_given_the_server_key_missing_when_readyz_then_503_names_the_tls_material(direct_mode):
    Path(direct_mode["LISTENER_KEYFILE"]).unlink()
    status, body = readyz()
    assert status == 503
    assert body["checks"]["tls"].startswith("TLS material unusable")
    assert body["checks"]["database"] == body["checks"]["broker"] == "ok"


def test_given_the_ca_bundle_unreadable_when_readyz_then_503_names_the_bundle(direct_mode):
    Path(direct_mode["LISTENER_CA_BUNDLE"]).write_text("not a certificate\n")
    status, body = readyz()
    assert status == 503
    assert "LISTENER_CA_BUNDLE" in body["checks"]["tls"]


def test_given_no_tls_files_named_when_readyz_then_503_names_the_variable(direct_mode, monkeypatch):
    monkeypatch.delenv("LISTENER_CERTFILE")
    status, body = readyz()
    assert status == 503
    assert "LISTENER_CERTFILE" in body["checks"]["tls"]


def test_given_proxy_mode_when_readyz_then_no_tls_check_because_the_proxy_ends_tls(settings, monkeypatch):
    settings.LISTENER_MODE = "proxy"
    for name in ("LISTENER_CERTFILE", "LISTENER_KEYFILE", "LISTENER_CA_BUNDLE"):
        monkeypatch.delenv(name, raising=False)
    status, body = readyz()
    assert status == 200
    assert body["checks"] == {"database": "ok", "broker": "ok", "workers": "ok"}


def test_healthz_metrics_and_unknown_paths_answer_as_before():
    assert call("/healthz")[0::2] == (200, b'{"status": "ok"}')
    status, headers, _ = call("/metrics")
    assert status == 200 and headers["Content-Type"].startswith("text/plain")
    assert call("/other")[0] == 404


def test_given_a_scraper_asking_for_openmetrics_when_scraping_the_side_port_then_openmetrics():
    environ: dict = {}
    setup_testing_defaults(environ)
    environ.update(PATH_INFO="/metrics", HTTP_ACCEPT="application/openmetrics-text; version=1.0.0")
    answer: dict = {}
    body = b"".join(metrics_server.app(environ, lambda status, headers: answer.update(headers)))
    assert answer["Content-Type"].startswith("application/openmetrics-text")
    assert body.endswith(b"# EOF\n")


def test_given_no_worker_has_loaded_the_app_when_readyz_then_503_names_the_workers(direct_mode):
    """The master listens long before a worker serves: a Service must not send events there yet."""
    workers_reset()
    status, body = readyz()
    assert status == 503
    assert body["checks"]["workers"] == "no listener worker serves yet (loading the app)"
    assert body["checks"]["database"] == body["checks"]["tls"] == "ok"


def test_given_the_only_worker_gone_when_readyz_then_503(direct_mode):
    worker_gone(os.getpid())
    assert readyz()[0] == 503


def test_given_a_worker_killed_without_exiting_cleanly_when_readyz_then_its_marker_counts_for_nothing(
    direct_mode, worker_serves
):
    """A SIGKILLed worker leaves its marker behind: the process itself is looked for."""
    workers_reset()
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    worker_serving(int(dead.stdout))
    (worker_serves / "serving-not-a-pid").touch()
    assert readyz()[0] == 503
    worker_serving(os.getpid())
    assert readyz()[0] == 200


def test_given_the_side_port_served_when_probing_over_http_then_readyz_and_healthz_answer(direct_mode):
    server = metrics_server.start(f"127.0.0.1:{free_port()}")
    try:
        port = server.server_address[1]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=10) as response:
            assert response.status == 200
            assert json.loads(response.read())["checks"]["tls"] == "ok"
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as response:
            assert response.read() == b'{"status": "ok"}'
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/nothing", timeout=10)
        assert missing.value.code == 404
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_given_the_real_listener_when_probing_its_side_port_then_ready_once_its_worker_serves():
    """Its master listens first (503: no worker serves yet), then its worker has loaded the app."""
    listener = start_listener()
    try:
        url = f"http://127.0.0.1:{listener.metrics_port}/readyz"
        answers: list[tuple[int, dict]] = []
        deadline = time.monotonic() + 120
        while (not answers or answers[-1][0] != 200) and time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(url, timeout=15) as response:
                    answers.append((response.status, json.loads(response.read())["checks"]))
            except urllib.error.HTTPError as refused:
                answers.append((refused.code, json.loads(refused.read())["checks"]))
                time.sleep(0.1)
        assert answers[-1] == (200, {"database": "ok", "broker": "ok", "workers": "ok", "tls": "ok"})
        # Before that, only the workers were missing.
        assert all(checks["workers"] != "ok" for _, checks in answers[:-1])
    finally:
        listener.stop()
