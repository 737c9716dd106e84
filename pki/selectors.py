"""Reads of the certificate authority: the CAs trusted, issuing and serving now, and the
certificates (their status computed in the database, those due for renewal)."""

from __future__ import annotations

import datetime as dt

from django.db.models import Case, CharField, Count, Q, QuerySet, Value, When
from django.utils import timezone

from fleet.models import Kyma

from .models import Certificate, CertificateAuthority, CertificatePurpose, CertificateStatus


def status_expression(now: dt.datetime) -> Case:
    return Case(
        When(superseded_at__isnull=False, then=Value(CertificateStatus.SUPERSEDED)),
        When(not_after__lte=now, then=Value(CertificateStatus.EXPIRED)),
        When(renew_after__lte=now, then=Value(CertificateStatus.RENEWING)),
        default=Value(CertificateStatus.VALID),
        output_field=CharField(),
    )


def certificates_with_status(now: dt.datetime | None = None) -> QuerySet:
    return Certificate.objects.annotate(current_status=status_expression(now or timezone.now()))


def certificate_counts(now: dt.datetime | None = None) -> dict[tuple[str, str], int]:
    """Number of certificates by (purpose, status)."""
    rows = (
        certificates_with_status(now).values("purpose", "current_status").annotate(n=Count("id")).order_by()
    )
    return {(row["purpose"], row["current_status"]): row["n"] for row in rows}


def certificates_expiring(within: dt.timedelta, now: dt.datetime | None = None) -> QuerySet:
    now = now or timezone.now()
    return Certificate.objects.filter(
        superseded_at__isnull=True, not_after__gt=now, not_after__lte=now + within
    )


def renewals_overdue(grace: dt.timedelta, now: dt.datetime | None = None) -> QuerySet:
    """Current certificates whose renewal should have happened more than ``grace`` ago."""
    now = now or timezone.now()
    return Certificate.objects.filter(Q(superseded_at__isnull=True) & Q(renew_after__lt=now - grace))


def bundle_authorities(now: dt.datetime | None = None) -> list[CertificateAuthority]:
    """The CAs everyone trusts now: every CA that joined and has not expired, newest first."""
    now = now or timezone.now()
    return list(CertificateAuthority.objects.filter(not_after__gt=now, joined_bundle_at__lte=now))


def issuing_authority(now: dt.datetime | None = None) -> CertificateAuthority | None:
    authorities = bundle_authorities(now)
    return authorities[0] if authorities else None


def serving_authority(now: dt.datetime | None = None) -> CertificateAuthority | None:
    """The CA whose certificate the listener presents: the newest one past its grace period."""
    now = now or timezone.now()
    authorities = bundle_authorities(now)
    serving = [ca for ca in authorities if ca.serving_from <= now]
    return serving[0] if serving else (authorities[-1] if authorities else None)


def ca_bundle_pem(now: dt.datetime | None = None) -> bytes:
    return b"".join(ca.certificate_pem.encode() for ca in bundle_authorities(now))


def current_runtime_certificate(kyma: Kyma) -> Certificate | None:
    return (
        Certificate.objects.select_related("issuer")
        .filter(kyma=kyma, purpose=CertificatePurpose.RUNTIME, superseded_at__isnull=True)
        .first()
    )


def certificates_due(now: dt.datetime | None = None, limit: int | None = None) -> list[int]:
    """Ids of Kymas whose runtime certificate must be renewed now (oldest deadline first)."""
    now = now or timezone.now()
    due = (
        Certificate.objects.filter(
            purpose=CertificatePurpose.RUNTIME, superseded_at__isnull=True, renew_after__lte=now
        )
        .order_by("renew_after")
        .values_list("kyma_id", flat=True)
    )
    return list(due[:limit] if limit else due)
