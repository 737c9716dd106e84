"""What upstream's dashboards and proxies expect of the listener: its metric names and Istio's
``Cert=`` encoded as a URL query value (``+`` for a space)."""

from __future__ import annotations

import datetime as dt
import time
import urllib.request
from urllib.parse import quote, quote_plus

import pytest
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from listener import identity
from pki import crypto, selectors
from tests.factories import KymaFactory
from tests.support.listener import (
    Credentials,
    event_body,
    listener_for_test,
    module_listener,
    request,
)

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

PATH = "/v2/lifecycle-manager/event"


@pytest.fixture(scope="module")
def running_listener(django_db_setup, django_db_blocker):
    started = module_listener(django_db_blocker, mode="proxy", trusted_proxies="127.0.0.0/8,::1")
    yield started
    started[0].stop()


@pytest.fixture
def listener(running_listener):
    return listener_for_test(running_listener)


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

    # The listener writes its totals a moment after it fell idle: wait until the request shows.
    deadline = time.monotonic() + 10
    while not getattr(
        (found := families(listener.metrics_port)).get("watcher_listener_request_duration"), "samples", None
    ):
        assert time.monotonic() < deadline, "the request never showed in the metrics"
        time.sleep(0.02)
    upstream = found["watcher_listener_request_duration"]
    assert upstream.type == "gauge"
    [sample] = upstream.samples
    assert sample.labels == {"server_name": "listener"}
    assert 0 < sample.value < 60
    assert found["watcher_listener_request_duration_seconds"].type == "histogram"


def plus_encoded(pem: bytes, *, quoted: bool) -> str:
    """Cert= as a URL query value: spaces become ``+``, the PEM's own ``+`` becomes ``%2B``."""
    cert = quote_plus(pem.decode())
    assert "+CERTIFICATE-----" in cert
    value = f'"{cert}"' if quoted else cert
    return f'By=spiffe://cluster.local/ns/kcp/sa/listener;Hash=abc;Cert={value};Subject="CN=x"'


@pytest.mark.parametrize("quoted", [True, False])
def test_given_cert_encoded_with_plus_for_spaces_when_posting_then_accepted(listener, creds, quoted):
    header = plus_encoded(creds.cert, quoted=quoted)
    status, body = request(
        listener.port, None, PATH, event_body(), headers={"X-Forwarded-Client-Cert": header}
    )
    assert status == 200, body
    assert body["kyma"].startswith("kcp-system/")


def test_given_a_plus_encoded_certificate_from_a_foreign_ca_when_posting_then_still_401(listener, creds):
    now = timezone.now()
    foreign_ca = crypto.create_ca(common_name="foreign", now=now, validity=dt.timedelta(days=1))
    foreign = crypto.issue_certificate(
        ca=foreign_ca,
        common_name="rt-names",
        dns_names=["rt-names.kyma.example.com"],
        now=now,
        validity=dt.timedelta(hours=1),
    )
    header = plus_encoded(foreign.certificate_pem, quoted=True)
    status, body = request(
        listener.port, None, PATH, event_body(), headers={"X-Forwarded-Client-Cert": header}
    )
    assert status == 401
    assert "not trusted" in body["detail"]


def test_plus_decodes_to_a_space_and_percent_2b_to_a_plus(creds):
    pem = (creds.cert + selectors.ca_bundle_pem()).decode()
    assert "+" in pem  # base64 of a real certificate: the case a plain unquote would get wrong
    assert identity.xfcc_certificate_pem(f"Cert={quote_plus(pem)}") == pem
    assert identity.xfcc_certificate_pem(f"Cert={quote(pem, safe='')}") == pem
