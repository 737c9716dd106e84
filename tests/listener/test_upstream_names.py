"""What upstream's dashboards and proxies expect of the listener: its metric names and Istio's
``Cert=`` encoded as a URL query value (``+`` for a space)."""

from __future__ import annotations

import urllib.request
from urllib.parse import quote

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.factories import KymaFactory
from tests.support.listener import Credentials, PkiSnapshot, event_body, klm_watcher, request, start_listener

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

PATH = "/v2/lifecycle-manager/event"


@pytest.fixture(scope="module")
def running_listener(django_db_setup, django_db_blocker):
    with django_db_blocker.unblock():
        snapshot = PkiSnapshot()
        running = start_listener(mode="proxy", trusted_proxies="127.0.0.0/8,::1")
    yield running, snapshot
    running.stop()


@pytest.fixture
def listener(running_listener):
    running, snapshot = running_listener
    snapshot.restore()
    klm_watcher()
    return running


@pytest.fixture
def creds():
    return Credentials.for_kyma(KymaFactory(runtime_id="rt-names", skr_domain="rt-names.kyma.example.com"))


def families(port: int) -> dict:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return {family.name: family for family in text_string_to_metric_families(text)}


def test_given_a_request_when_scraping_then_upstreams_duration_gauge_is_there_beside_ours(listener, creds):
    header = f'Hash=abc;Cert="{quote(creds.cert.decode(), safe="")}"'
    status, body = request(
        listener.port, None, PATH, event_body(), headers={"X-Forwarded-Client-Cert": header}
    )
    assert status == 200, body

    found = families(listener.metrics_port)
    upstream = found["watcher_listener_request_duration"]
    assert upstream.type == "gauge"
    [sample] = upstream.samples
    assert sample.labels == {"server_name": "listener"}
    assert 0 < sample.value < 60
    assert found["watcher_listener_request_duration_seconds"].type == "histogram"
