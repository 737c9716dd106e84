"""Scrape-time PKI gauges (upstream alerts on certificates close to expiry and late renewals)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily

from . import selectors
from .models import CertificatePurpose, CertificateStatus, GatewaySecretState

EXPIRING_WITHIN = dt.timedelta(days=7)
OVERDUE_AFTER = dt.timedelta(hours=1)


def collect() -> Iterator[GaugeMetricFamily]:
    now = timezone.now()
    counts = selectors.certificate_counts(now)
    family = GaugeMetricFamily(
        "controlplane_certificates", "Certificates by purpose and status", labels=["purpose", "status"]
    )
    for purpose in CertificatePurpose.values:
        for status in CertificateStatus.values:
            family.add_metric([purpose, status], counts.get((purpose, status), 0))
    yield family
    yield GaugeMetricFamily(
        "controlplane_certificates_expiring_soon",
        "Current certificates expiring within 7 days",
        value=selectors.certificates_expiring(EXPIRING_WITHIN, now).count(),
    )
    yield GaugeMetricFamily(
        "controlplane_certificate_renewals_overdue",
        "Current certificates whose renewal is more than an hour late",
        value=selectors.renewals_overdue(OVERDUE_AFTER, now).count(),
    )
    expiry = GaugeMetricFamily(
        "controlplane_ca_expiry_timestamp_seconds",
        "Expiry of each trusted CA",
        labels=["fingerprint", "role"],
    )
    issuing, serving = selectors.issuing_authority(now), selectors.serving_authority(now)
    for ca in selectors.bundle_authorities(now):
        role = (
            "issuing"
            if issuing and ca.pk == issuing.pk
            else "serving"
            if serving and ca.pk == serving.pk
            else "trusted"
        )
        expiry.add_metric([ca.fingerprint, role], ca.not_after.timestamp())
    yield expiry
    yield from _gateway()


def _gateway() -> Iterator[GaugeMetricFamily]:
    """The Istio gateway's credential Secret as the control plane last wrote or found it."""
    expiry = GaugeMetricFamily(
        "controlplane_gateway_certificate_expiry_timestamp_seconds",
        "Expiry of the server certificate in the Istio gateway's credential Secret, as last written or "
        "found there (absent where the control plane does not keep it: GATEWAY_SECRET_SYNC off)",
        labels=["secret"],
    )
    synced = GaugeMetricFamily(
        "controlplane_gateway_secret_synced_timestamp_seconds",
        "When the gateway's credential Secret was last found current or written",
        labels=["secret"],
    )
    failing = GaugeMetricFamily(
        "controlplane_gateway_secret_sync_failing",
        "1 while the last attempt to read or write the gateway's credential Secret failed",
        labels=["secret"],
    )
    cas = GaugeMetricFamily(
        "controlplane_gateway_secret_cas",
        "CAs in the gateway's ca.crt (2 during a CA rotation)",
        labels=["secret"],
    )
    for state in GatewaySecretState.objects.all():
        secret = f"{state.namespace}/{state.name}"
        if state.certificate_not_after is not None:
            expiry.add_metric([secret], state.certificate_not_after.timestamp())
            cas.add_metric([secret], len(state.bundle_fingerprints))
        if state.synced_at is not None:
            synced.add_metric([secret], state.synced_at.timestamp())
        failing.add_metric([secret], 1 if state.last_error else 0)
    yield expiry
    yield synced
    yield failing
    yield cas
