"""Slots of open ModuleConfig watches: at most ``MODULECONFIG_WATCH_PER_CREDENTIAL`` per credential.

A credential is the authenticated API token (``ApiToken`` or DRF token row; module credentials
will be tokens too), else the user of a session. A slot is a row with a unique
``(credential, slot)``: claiming one is an INSERT that either succeeds or collides, so the bound
holds across every web process without locks. Open watches renew ``expires_at``; a slot whose
process died expires after ``MODULECONFIG_WATCH_SLOT_TTL`` and is taken over.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from fleet.models import ModuleConfigWatch
from kernel.errors import ApplicationError


class TooManyWatches(ApplicationError):
    status_code = 429
    code = "too_many_watches"


def _ttl() -> dt.timedelta:
    return dt.timedelta(seconds=settings.MODULECONFIG_WATCH_SLOT_TTL)


def watch_slot_claim(*, credential: str, module: str = "") -> ModuleConfigWatch:
    """Take a free slot of ``credential``; ``TooManyWatches`` (429) when all are open."""
    bound = settings.MODULECONFIG_WATCH_PER_CREDENTIAL
    now = timezone.now()
    ModuleConfigWatch.objects.filter(credential=credential, expires_at__lte=now).delete()
    taken = set(ModuleConfigWatch.objects.filter(credential=credential).values_list("slot", flat=True))
    for slot in range(bound):
        if slot in taken:
            continue
        try:
            with transaction.atomic():
                return ModuleConfigWatch.objects.create(
                    credential=credential, slot=slot, module=module, expires_at=now + _ttl()
                )
        except IntegrityError:  # another process took it just now
            continue
    raise TooManyWatches(
        f"this credential already has {bound} open watches (MODULECONFIG_WATCH_PER_CREDENTIAL); "
        "close one, or resume with ?since_revision= once one has ended"
    )


def watch_slots_renew(*, slot_ids: Iterable[int]) -> None:
    ids = list(slot_ids)
    if ids:
        ModuleConfigWatch.objects.filter(pk__in=ids).update(expires_at=timezone.now() + _ttl())


def watch_slot_release(*, slot_id: int) -> None:
    ModuleConfigWatch.objects.filter(pk=slot_id).delete()
