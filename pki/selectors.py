"""Reads of certificates with their status computed in the database."""

from __future__ import annotations

import datetime as dt

from django.db.models import Case, CharField, Count, Q, QuerySet, Value, When
from django.utils import timezone

from .models import Certificate, CertificateStatus


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
