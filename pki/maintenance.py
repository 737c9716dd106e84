"""What beat runs periodically: a CA exists, rotates in time (through the same rotation job as the
admin and the CLI), certificates renew in time, expired superseded ones go."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from django.utils import timezone

from . import services
from .jobs import ca_rotation_start
from .models import Certificate


@dataclass(frozen=True)
class MaintenanceReport:
    ca_created: bool
    ca_rotated: bool
    renewed_kymas: list[int]
    listener_certificate: str


def pki_maintain(*, now: dt.datetime | None = None) -> MaintenanceReport:
    """What beat runs periodically: a CA exists, rotates in time, certificates renew in time."""
    now = now or timezone.now()
    _, created = services.ca_bootstrap(now=now)
    rotated = False
    if not created and services.ca_rotation_due(now):
        ca_rotation_start(now=now)
        rotated = True
    renewed = services.certificates_renew_due(now=now)
    listener = services.listener_certificate(now=now)
    # Superseded certificates stay visible until they expire, then go.
    Certificate.objects.filter(superseded_at__isnull=False, not_after__lte=now).delete()
    return MaintenanceReport(created, rotated, renewed, listener.fingerprint)
