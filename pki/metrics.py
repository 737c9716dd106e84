"""Scrape-time PKI gauges (upstream alerts on certificates close to expiry and late renewals)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily

from . import selectors
from .models import CertificatePurpose, CertificateStatus

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
