"""Reads of the fleet domain that more than one interface needs.

The "silent runtime watcher" rule lives here once (:func:`watcher_silent_after`,
:func:`watcher_q`): the reconciler's condition, beat's check, the listener's heartbeat, the
dashboard and the admin filter all ask it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

from django.conf import settings
from django.db.models import F, Q
from django.utils import timezone

from fleet.models import Kyma, KymaState, ModuleConfig
from fleet.models.kyma import DEFAULT_CHANNEL, SKIP_RECONCILIATION_LABEL
from fleet.rollouts.planning import Member


def kyma_ids_using_module(module_name: str) -> list[int]:
    """Ids of the Kymas whose spec enables the module (portable: no JSON containment lookup)."""
    return [
        kyma_id
        for kyma_id, modules in Kyma.objects.values_list("id", "modules").iterator(chunk_size=2000)
        if any(isinstance(m, dict) and m.get("name") == module_name for m in modules or ())
    ]


def kyma_has_module_config(*, namespace: str, name: str, module_id: int) -> bool:
    """Whether Kyma ``namespace/name`` has a ModuleConfig of the module (it uses the module)."""
    return ModuleConfig.objects.filter(
        kyma__namespace=namespace, kyma__name=name, module_id=module_id
    ).exists()


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
    """Kymas whose periodic reconcile is due (or that never had one), oldest deadline first.
    Paused Kymas (upstream's skip-reconciliation label) are passed by unless being deleted."""
    now = timezone.now()
    # has_key first: a Kyma without the label must not fall out of exclude() on a NULL comparison.
    paused = Q(labels__has_key=SKIP_RECONCILIATION_LABEL) & Q(
        **{f"labels__{SKIP_RECONCILIATION_LABEL}": "true"}, deletion_timestamp__isnull=True
    )
    due = (
        Kyma.objects.filter(Q(next_reconcile_at__lte=now) | Q(next_reconcile_at__isnull=True))
        .exclude(paused)
        .order_by(F("next_reconcile_at").asc(nulls_first=True))
        .values_list("id", flat=True)[:limit]
    )
    ids = list(due)
    for start in range(0, len(ids), batch_size):
        yield ids[start : start + batch_size]


def watcher_silent_after() -> dt.timedelta:
    """How long a runtime watcher may stay unheard before it counts as silent (0: never)."""
    return dt.timedelta(seconds=settings.WATCHER_SILENT_AFTER)


def watcher_heard_recently(last_seen: dt.datetime | None, now: dt.datetime) -> bool:
    """Whether a runtime watcher last heard at ``last_seen`` is alive now: heard within the
    window. False when the detection is off (``WATCHER_SILENT_AFTER=0``): nothing says so then."""
    window = watcher_silent_after()
    return bool(window) and last_seen is not None and now - last_seen <= window


def watcher_q(kind: str, now: dt.datetime) -> Q:
    """Kymas whose runtime watcher is ``seen`` (heard within the window), ``silent`` (heard
    before, not since) or ``never`` heard although the Kyma has a kubeconfig. Kymas being
    deleted are left out: their watcher is being removed on purpose."""
    window = watcher_silent_after()
    alive = Q(deletion_timestamp__isnull=True)
    if not window:  # the detection is off: heard once counts as seen
        if kind == "seen":
            return alive & Q(watcher_last_seen_at__isnull=False)
        if kind == "silent":
            return Q(pk__in=[])
    cutoff = now - window
    if kind == "seen":
        return alive & Q(watcher_last_seen_at__gte=cutoff)
    if kind == "silent":
        return alive & Q(watcher_last_seen_at__lt=cutoff)
    if kind == "never":
        return alive & Q(watcher_last_seen_at__isnull=True) & ~Q(kubeconfig="")
    raise ValueError(f"unknown watcher state {kind!r}")


def kyma_ids_watcher_silent(*, limit: int, batch_size: int = 500) -> Iterator[list[int]]:
    """Ready Kymas whose runtime watcher fell silent (nothing when the detection is off)."""
    if not watcher_silent_after():
        return
    silent = (
        Kyma.objects.filter(watcher_q("silent", timezone.now()), state=KymaState.READY)
        .order_by("watcher_last_seen_at")
        .values_list("id", flat=True)
    )
    ids = list(silent[:limit])
    for start in range(0, len(ids), batch_size):
        yield ids[start : start + batch_size]


def module_channel_of(kyma_channel: str, modules: Any, module: str) -> str | None:
    """The channel in which a Kyma's spec enables ``module`` (``None``: it does not)."""
    for entry in modules or ():
        if isinstance(entry, dict) and entry.get("name") == module:
            return entry.get("channel") or kyma_channel or DEFAULT_CHANNEL
    return None


def module_users(module: str, channel: str) -> list[Member]:
    """Kymas (not being deleted) that enable ``module`` in ``channel``, as rollout members (each
    with no old target yet: the caller knows it)."""
    rows = Kyma.objects.filter(deletion_timestamp__isnull=True).values_list(
        "id", "uid", "labels", "channel", "modules"
    )
    return [
        Member(kyma_id, str(uid), labels or {}, None)
        for kyma_id, uid, labels, kyma_channel, modules in rows.iterator(chunk_size=2000)
        if module_channel_of(kyma_channel, modules, module) == channel
    ]
