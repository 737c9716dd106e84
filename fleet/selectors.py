"""Reads of the core domain that more than one interface needs."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

from django.conf import settings
from django.db.models import F, Q
from django.utils import timezone

from fleet.models import Kyma, KymaState


def kyma_ids_using_module(module_name: str) -> list[int]:
    """Ids of the Kymas whose spec enables the module (portable: no JSON containment lookup)."""
    return [
        kyma_id
        for kyma_id, modules in Kyma.objects.values_list("id", "modules").iterator(chunk_size=2000)
        if any(isinstance(m, dict) and m.get("name") == module_name for m in modules or ())
    ]


def kyma_ids_all(batch_size: int = 500) -> Iterator[list[int]]:
    """All Kyma ids in batches, for fan-outs that must not hold one huge list or query."""
    last = 0
    while True:
        batch = list(
            Kyma.objects.filter(id__gt=last).order_by("id").values_list("id", flat=True)[:batch_size]
        )
        if not batch:
            return
        yield batch
        last = batch[-1]


def kyma_ids_due(*, limit: int, batch_size: int = 500) -> Iterator[list[int]]:
    """Kymas whose periodic reconcile is due (or that never had one), oldest deadline first."""
    now = timezone.now()
    due = (
        Kyma.objects.filter(Q(next_reconcile_at__lte=now) | Q(next_reconcile_at__isnull=True))
        .order_by(F("next_reconcile_at").asc(nulls_first=True))
        .values_list("id", flat=True)[:limit]
    )
    ids = list(due)
    for start in range(0, len(ids), batch_size):
        yield ids[start : start + batch_size]


def kyma_ids_watcher_silent(*, limit: int, batch_size: int = 500) -> Iterator[list[int]]:
    """Ready Kymas whose runtime watcher has sent no heartbeat within ``WATCHER_SILENT_AFTER``
    (nothing when the detection is off)."""
    if settings.WATCHER_SILENT_AFTER <= 0:
        return
    cutoff = timezone.now() - dt.timedelta(seconds=settings.WATCHER_SILENT_AFTER)
    silent = Kyma.objects.filter(
        state=KymaState.READY, deletion_timestamp__isnull=True, watcher_last_seen_at__lt=cutoff
    ).order_by("watcher_last_seen_at")
    ids = list(silent.values_list("id", flat=True)[:limit])
    for start in range(0, len(ids), batch_size):
        yield ids[start : start + batch_size]
