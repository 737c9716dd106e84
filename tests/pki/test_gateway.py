"""The gateway's credential Secret, kept current by the control plane (pki.gateway), against an
emulated cluster: written when missing or different, left alone when current, both CAs in
``ca.crt`` during a rotation, the server certificate switched after the grace period, and what it
holds visible as metrics."""

from __future__ import annotations

import base64
import datetime as dt

import pytest
from prometheus_client.core import GaugeMetricFamily

from fleet.k8s.client import RuntimeClient
from kernel.documents.yamlio import dump_yaml
from pki import crypto, gateway, selectors, services
from pki import metrics as pki_metrics
from pki.models import GatewaySecretState

pytestmark = pytest.mark.django_db

T0 = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.UTC)
DAY = dt.timedelta(days=1)


@pytest.fixture
def cluster(runtimes) -> RuntimeClient:
    """The control plane's own cluster, with the ingress gateway's namespace."""
    emulated = runtimes()
    client = RuntimeClient.from_kubeconfig(dump_yaml([emulated.kubeconfig()]))
    client.ensure_namespace("istio-system", labels={})
    yield client
    client.close()


def held(client: RuntimeClient) -> dict[str, bytes]:
    secret = client.get("v1", "Secret", "kcp-listener-gateway-tls", "istio-system")
    assert secret is not None
    return {key: base64.b64decode(value) for key, value in secret["data"].items()}


def fingerprints(pem: bytes) -> list[str]:
    return [crypto.fingerprint_sha256(c) for c in crypto.load_certificates(pem)]


def test_a_missing_secret_is_written_then_left_alone_while_current(cluster):
    first = gateway.gateway_secret_sync(client=cluster, now=T0)
    again = gateway.gateway_secret_sync(client=cluster, now=T0 + dt.timedelta(minutes=5))

    assert first.written and not again.written
    data = held(cluster)
    listener = services.listener_certificate(now=T0)
    assert data["tls.crt"] == listener.certificate_pem.encode()
    assert data["tls.key"] == listener.private_key.reveal_bytes()
    assert fingerprints(data["ca.crt"]) == [selectors.issuing_authority(T0).fingerprint]
    state = GatewaySecretState.objects.get()
    assert (state.writes, state.certificate_fingerprint) == (1, listener.fingerprint)


def test_a_secret_changed_by_someone_else_is_put_back(cluster):
    gateway.gateway_secret_sync(client=cluster, now=T0)
    cluster.patch(
        "v1",
        "Secret",
        "kcp-listener-gateway-tls",
        "istio-system",
        {"data": {"tls.crt": base64.b64encode(b"edited").decode()}},
        field_manager="someone",
    )

    assert gateway.gateway_secret_sync(client=cluster, now=T0 + DAY).written
    assert held(cluster)["tls.crt"] == services.listener_certificate(now=T0 + DAY).certificate_pem.encode()


def test_a_renewed_listener_certificate_reaches_the_secret(cluster):
    gateway.gateway_secret_sync(client=cluster, now=T0)
    before = held(cluster)["tls.crt"]
    later = T0 + 31 * DAY  # past PKI_CERT_RENEW_BEFORE_DAYS (30) of a 60-day certificate

    assert gateway.gateway_secret_sync(client=cluster, now=later).written
    assert held(cluster)["tls.crt"] != before
    assert crypto.load_certificate(held(cluster)["tls.crt"]).not_valid_after_utc > later + 29 * DAY


def test_after_a_ca_rotation_both_cas_are_trusted_and_the_server_certificate_switches_after_the_grace(
    cluster,
):
    old = services.ca_bootstrap(now=T0)[0]
    gateway.gateway_secret_sync(client=cluster, now=T0)
    rotated_at = T0 + 10 * DAY
    new = services.ca_rotate(now=rotated_at)

    gateway.gateway_secret_sync(client=cluster, now=rotated_at)
    during = held(cluster)
    assert fingerprints(during["ca.crt"]) == [new.fingerprint, old.fingerprint]
    server = crypto.load_certificate(during["tls.crt"])
    assert server.issuer == crypto.load_certificate(old.certificate_pem.encode()).subject  # still the old CA

    just_before = rotated_at + 4 * DAY - dt.timedelta(minutes=1)  # PKI_CA_GRACE_DAYS: 4
    gateway.gateway_secret_sync(client=cluster, now=just_before)
    assert held(cluster)["tls.crt"] == during["tls.crt"]

    after = rotated_at + 4 * DAY + dt.timedelta(minutes=1)
    assert gateway.gateway_secret_sync(client=cluster, now=after).written
    switched = held(cluster)
    crypto.verify_server(  # raises unless the new CA issued it
        crypto.load_certificate(switched["tls.crt"]),
        [crypto.load_certificate(new.certificate_pem.encode())],
        hostname="localhost",
        now=after,
    )
    assert fingerprints(switched["ca.crt"]) == [new.fingerprint, old.fingerprint]

    gone = old.not_after + dt.timedelta(minutes=1)  # the old CA expired: it leaves ca.crt
    gateway.gateway_secret_sync(client=cluster, now=gone)
    assert fingerprints(held(cluster)["ca.crt"]) == [new.fingerprint]


def test_a_cluster_that_cannot_be_reached_is_recorded_and_raised(cluster, settings):
    unreachable = RuntimeClient.from_kubeconfig(
        dump_yaml(
            [
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:9"}}],
                    "users": [{"name": "u", "user": {"token": "t"}}],
                    "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                    "current-context": "c",
                }
            ]
        )
    )
    gateway.gateway_secret_sync(client=cluster, now=T0)
    with pytest.raises(gateway.RuntimeAPIError):
        gateway.gateway_secret_sync(client=unreachable, now=T0 + DAY)
    state = GatewaySecretState.objects.get()
    assert state.last_error and state.synced_at == T0

    families = {f.name: f for f in pki_metrics.collect() if isinstance(f, GaugeMetricFamily)}
    assert families["controlplane_gateway_secret_sync_failing"].samples[0].value == 1
    expiry = families["controlplane_gateway_certificate_expiry_timestamp_seconds"].samples[0]
    assert expiry.labels == {"secret": "istio-system/kcp-listener-gateway-tls"}
    assert expiry.value == services.listener_certificate(now=T0).not_after.timestamp()
