"""Proxy mode (behind Istio/Envoy): the certificate comes from X-Forwarded-Client-Cert."""

from __future__ import annotations

import datetime as dt
from urllib.parse import quote

import pytest
from django.utils import timezone

from pki import crypto, selectors, services
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


def xfcc(
    pem: bytes, *, quoted: bool = True, before: str = "By=spiffe://cluster.local/ns/kcp/sa/listener;Hash=abc"
) -> str:
    cert = quote(pem.decode(), safe="")
    value = f'"{cert}"' if quoted else cert
    return f'{before};Cert={value};Subject="CN=x";URI=spiffe://cluster.local/ns/x'


@pytest.fixture(scope="module")
def trusted_listener(django_db_setup, django_db_blocker):
    running, snapshot = module_listener(django_db_blocker, mode="proxy", trusted_proxies="127.0.0.0/8,::1")
    yield running, snapshot
    running.stop()


@pytest.fixture(scope="module")
def distrusting_listener(django_db_setup, django_db_blocker):
    running, snapshot = module_listener(django_db_blocker, mode="proxy", trusted_proxies="10.0.0.0/8")
    yield running, snapshot
    running.stop()


@pytest.fixture
def listener(trusted_listener):
    return listener_for_test(trusted_listener)


@pytest.fixture
def kyma_creds():
    kyma = KymaFactory(runtime_id="rt-proxy", skr_domain="rt-proxy.kyma.example.com")
    return kyma, Credentials.for_kyma(kyma)


def test_given_a_trusted_proxy_and_a_valid_certificate_when_posting_then_200(
    listener, kyma_creds, task_queue
):
    kyma, creds = kyma_creds
    task_queue()
    status, body = request(
        listener.port, None, PATH, event_body(), headers={"X-Forwarded-Client-Cert": xfcc(creds.cert)}
    )
    assert status == 200, body
    assert [t.args for t in task_queue()] == [[kyma.pk]]


def test_given_an_unquoted_cert_field_and_several_elements_then_the_first_element_counts(
    listener, kyma_creds
):
    _, creds = kyma_creds
    other = Credentials.for_kyma(KymaFactory(skr_domain="else.example.com"))
    header = xfcc(creds.cert, quoted=False) + "," + xfcc(other.cert)
    status, body = request(
        listener.port, None, PATH, event_body(), headers={"X-Forwarded-Client-Cert": header}
    )
    assert status == 200
    assert body["kyma"] == f"kcp-system/{kyma_creds[0].name}"


def test_given_an_untrusted_peer_when_posting_then_401(distrusting_listener, kyma_creds):
    running = listener_for_test(distrusting_listener)
    _, creds = kyma_creds
    status, body = request(
        running.port, None, PATH, event_body(), headers={"X-Forwarded-Client-Cert": xfcc(creds.cert)}
    )
    assert status == 401
    assert "not a trusted proxy" in body["detail"]


@pytest.mark.parametrize(
    ("make_header", "needle"),
    [
        (lambda creds: None, "does not contain 'X-Forwarded-Client-Cert'"),
        (lambda creds: "By=x;Hash=y", "no Cert= field"),
        (lambda creds: 'Cert="not-a-pem"', "no valid PEM certificate"),
        (lambda creds: "Cert=" + "a" * 33000, "over 32 KiB"),
    ],
)
def test_given_a_missing_or_broken_header_when_posting_then_401(listener, kyma_creds, make_header, needle):
    header = make_header(kyma_creds[1])
    headers = {"X-Forwarded-Client-Cert": header} if header is not None else {}
    status, body = request(listener.port, None, PATH, event_body(), headers=headers)
    assert status == 401
    assert needle in body["detail"]


def test_given_a_foreign_or_expired_certificate_in_the_header_when_posting_then_401(listener, kyma_creds):
    now = timezone.now()
    foreign_ca = crypto.create_ca(common_name="foreign", now=now, validity=dt.timedelta(days=1))
    foreign = crypto.issue_certificate(
        ca=foreign_ca,
        common_name="rt-proxy",
        dns_names=["rt-proxy.kyma.example.com"],
        now=now,
        validity=dt.timedelta(hours=1),
    )
    ours = services.keypair(selectors.issuing_authority())
    expired = crypto.issue_certificate(
        ca=ours,
        common_name="rt-proxy",
        dns_names=["rt-proxy.kyma.example.com"],
        now=now - dt.timedelta(days=3),
        validity=dt.timedelta(days=1),
    )
    for pair in (foreign, expired):
        status, body = request(
            listener.port,
            None,
            PATH,
            event_body(),
            headers={"X-Forwarded-Client-Cert": xfcc(pair.certificate_pem)},
        )
        assert status == 401
        assert "not trusted" in body["detail"]
