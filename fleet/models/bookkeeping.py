"""The rows beside a Kyma: what the machinery keeps about it, each concern with one writer.

The Kyma row holds what people and the reconciler's status say about a runtime (spec and status);
operators edit it. What the control plane's own machinery writes, and writes often, lives in rows
of their own, keyed by the Kyma, so that the hottest writes of the system (queue marks, leases,
heartbeats) never lock the row an operator edits, and an operator's edit never waits on them:

================== ======================================================= =========================
row                holds                                                   written by
================== ======================================================= =========================
ReconcileState     the lease (who reconciles the Kyma now, until when) and the reconcile
                   its schedule (last and next reconcile, error streak)    (``fleet.queue.lease``,
                                                                           ``reconciler.status``)
ReconcileMark      the queue mark when it lives in the database (no Redis) ``fleet.queue`` (marks)
WatcherContact     when the runtime watcher was last heard, its report     the listener
RuntimeSync        what the reconciler last synced with the runtime        the reconciler
WatcherSettingsPin the runtime-watcher settings this runtime gets          rollouts
================== ======================================================= =========================

A row is made by its first write (an upsert), so a Kyma created anywhere (the API, ``apply``, a
bulk insert) needs none until then, and a reader that finds none reads the defaults
(:func:`row_or_default`). Every row goes with its Kyma (``ON DELETE CASCADE``).

Until release N+1 the Kyma table keeps its old columns of these fields (with database defaults,
so that this release inserts rows without them): the previous release's processes read and write
them while both releases run side by side during a rolling update (docs/operators/upgrades.md).
"""

from __future__ import annotations

from django.db import models

from .compiled import CompiledGet
from .kyma import Kyma


class BesideKyma(models.Model):
    """A row beside one Kyma (its primary key is the Kyma's)."""

    class Meta:
        abstract = True

    def __str__(self) -> str:
        return f"{type(self).__name__} of Kyma {self.pk}"


class ReconcileState(BesideKyma):
    """Who reconciles the Kyma now (a lease, renewed while the reconcile runs) and when it is
    reconciled next. Written by the reconcile that holds the lease (and by beat's sweep to take
    back a lease that ran out); read by beat's sweep (what is due)."""

    kyma = models.OneToOneField(
        Kyma, on_delete=models.CASCADE, primary_key=True, related_name="reconcile_state"
    )
    lease_owner = models.CharField(max_length=128, blank=True, default="")
    lease_until = models.DateTimeField(null=True, blank=True)
    last_reconcile_at = models.DateTimeField(null=True, blank=True)
    next_reconcile_at = models.DateTimeField(null=True, blank=True)
    error_streak = models.PositiveIntegerField(default=0)

    class Meta:
        indexes = [
            models.Index(fields=["next_reconcile_at"], name="reconcile_state_next"),
            models.Index(fields=["lease_until"], name="reconcile_state_lease"),
        ]


class ReconcileMark(BesideKyma):
    """The queue mark of a Kyma when marks live in the database (``fleet.queue.marks``): a task
    is queued and has not started (``queued_at``: its ETA), the time before which it must not
    read the runtime, the changes it must find stored, the spacing hint and the second (urgent)
    mark. With Redis marks this table stays empty."""

    kyma = models.OneToOneField(
        Kyma, on_delete=models.CASCADE, primary_key=True, related_name="reconcile_mark"
    )
    queued_at = models.DateTimeField(null=True, blank=True)
    not_before = models.DateTimeField(null=True, blank=True)
    changes = models.TextField(blank=True, default="")
    spaced_until = models.DateTimeField(null=True, blank=True)
    urgent_at = models.DateTimeField(null=True, blank=True)


class WatcherContact(BesideKyma):
    """The runtime watcher's liveness: when the listener last heard it (heartbeats and events),
    and what its last heartbeat reported. Written by the listener only."""

    kyma = models.OneToOneField(
        Kyma, on_delete=models.CASCADE, primary_key=True, related_name="watcher_contact"
    )
    last_seen_at = models.DateTimeField(null=True, blank=True, db_index=True)
    report = models.JSONField(default=dict, blank=True)


class RuntimeSync(BesideKyma):
    """What the reconciler last synced with the runtime: the generations of the runtime's Kyma
    (seen, and pushed from ours), the Watchers of the webhook configuration it applied (their
    rollout marks), and the runtime objects whose check can wait (``reconciler.apply``:
    ``"apiVersion|kind|ns|name"`` -> [content hash, epoch seconds when seen holding it]).
    Written by the reconciler only."""

    kyma = models.OneToOneField(Kyma, on_delete=models.CASCADE, primary_key=True, related_name="runtime_sync")
    runtime_kyma_generation = models.BigIntegerField(default=0)
    pushed_generation = models.BigIntegerField(default=0)
    applied_watchers = models.JSONField(default=list, blank=True)
    runtime_verified = models.JSONField(default=dict, blank=True)


class WatcherSettingsPin(BesideKyma):
    """The runtime-watcher settings this runtime gets (a ``RuntimeWatcherSettings`` digest): a
    rollout of new settings moves it wave by wave; a Kyma without one gets the fleet's at its
    next reconcile (``watchers.runtime_config``). Written by rollouts (and that first pin)."""

    kyma = models.OneToOneField(
        Kyma, on_delete=models.CASCADE, primary_key=True, related_name="watcher_settings_pin"
    )
    digest = models.CharField(max_length=64, blank=True, default="", db_index=True)


ROWS: dict[str, type[models.Model]] = {
    "reconcile_state": ReconcileState,
    "reconcile_mark": ReconcileMark,
    "watcher_contact": WatcherContact,
    "runtime_sync": RuntimeSync,
    "watcher_settings_pin": WatcherSettingsPin,
}
# Where each former column of the Kyma lives now: its old name -> (row, field).
FORMER_COLUMNS: dict[str, tuple[str, str]] = {
    "last_reconcile_at": ("reconcile_state", "last_reconcile_at"),
    "next_reconcile_at": ("reconcile_state", "next_reconcile_at"),
    "error_streak": ("reconcile_state", "error_streak"),
    "lease_owner": ("reconcile_state", "lease_owner"),
    "lease_until": ("reconcile_state", "lease_until"),
    "reconcile_queued_at": ("reconcile_mark", "queued_at"),
    "reconcile_not_before": ("reconcile_mark", "not_before"),
    "reconcile_changes": ("reconcile_mark", "changes"),
    "reconcile_spaced_until": ("reconcile_mark", "spaced_until"),
    "reconcile_urgent_at": ("reconcile_mark", "urgent_at"),
    "watcher_last_seen_at": ("watcher_contact", "last_seen_at"),
    "watcher_report": ("watcher_contact", "report"),
    "runtime_kyma_generation": ("runtime_sync", "runtime_kyma_generation"),
    "pushed_generation": ("runtime_sync", "pushed_generation"),
    "applied_watchers": ("runtime_sync", "applied_watchers"),
    "runtime_verified": ("runtime_sync", "runtime_verified"),
    "watcher_settings": ("watcher_settings_pin", "digest"),
}
# What a reconcile reads with its Kyma, in the same query (``select_related``).
RECONCILE_ROWS = ("reconcile_state", "watcher_contact", "runtime_sync", "watcher_settings_pin")
# The Kyma a reconcile reads, with those rows: its SQL compiled once per process (compiling the
# four joins cost more CPU than the query itself: :mod:`.compiled`).
KYMA_WITH_ROWS: CompiledGet[Kyma] = CompiledGet(lambda: Kyma.objects.select_related(*RECONCILE_ROWS))


def row_or_default(kyma: Kyma, name: str) -> models.Model:
    """The Kyma's row ``name`` (one of :data:`ROWS`) as loaded, or an unsaved one with the defaults
    when it has none yet (never a query when the row was read with ``select_related``)."""
    try:
        return getattr(kyma, name)
    except ROWS[name].DoesNotExist:
        row = ROWS[name](kyma=kyma)
        setattr(kyma, name, row)  # cached: the next access finds it
        return row


def row_write(model: type[BesideKyma], kyma_id: int, **values: object) -> None:
    """Write ``values`` into the Kyma's row of ``model``, making it when missing (one upsert;
    the other columns of a new row take their defaults). Raises IntegrityError when the Kyma is
    gone."""
    model.objects.bulk_create(
        [model(kyma_id=kyma_id, **values)],
        update_conflicts=True,
        unique_fields=["kyma"],
        update_fields=list(values),
    )
