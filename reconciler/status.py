"""The end of every reconcile: the state, the status written only when it changed, the next time."""

from __future__ import annotations

import contextlib
import copy
import datetime as dt
import logging
from dataclasses import dataclass

from django.conf import settings
from django.db import transaction

from fleet import queue
from fleet.k8s.client import RuntimeAPIError
from fleet.models import Kyma, KymaState, RuntimeSync
from fleet.models.bookkeeping import row_or_default, row_write
from fleet.models.kyma import KYMA_FINALIZER, OUR_KYMA_FINALIZERS, state_reason_of
from fleet.models.records import THROTTLED_MILLISECONDS, THROTTLED_REQUESTS
from fleet.resources.kinds import KymaKind
from fleet.services.counters import count
from kernel.timefmt import rfc3339

from . import modules, runtime_kyma
from .context import LeaseLost, ReconcileContext, comparable, derive_state, merged_conditions

log = logging.getLogger(__name__)

FINALIZER = KYMA_FINALIZER  # (fleet.models.kyma says why this one)
OUR_FINALIZERS = OUR_KYMA_FINALIZERS


def with_finalizer(finalizers: list[str]) -> list[str]:
    """``finalizers`` with exactly one of ours, upstream's, where the first of ours was (else last)."""
    result: list[str] = []
    for name in finalizers:
        if name not in OUR_FINALIZERS:
            result.append(name)
        elif FINALIZER not in result:
            result.append(FINALIZER)
    return result if FINALIZER in result else [*result, FINALIZER]


def without_finalizer(finalizers: list[str]) -> list[str]:
    """``finalizers`` with none of ours (upstream's or the legacy one)."""
    return [name for name in finalizers if name not in OUR_FINALIZERS]


@dataclass(frozen=True)
class Outcome:
    state: str
    runtime_writes: int
    message: str = ""
    changes: tuple[dict, ...] = ()
    drift: tuple[dict[str, str], ...] = ()  # objects found changed in the runtime and applied again
    lease_released: bool = False  # the status write released the reconcile's lease too
    kyma_deleted: bool = False  # the cleanup finished and the row is gone (nothing to record on)


def next_interval(state: str, error_streak: int) -> float:
    """Seconds until the next periodic reconcile, by state (Error backs off exponentially)."""
    if state == KymaState.READY:
        return settings.RECONCILE_READY_INTERVAL
    if state == KymaState.WARNING:
        return settings.RECONCILE_WARNING_INTERVAL
    if state == KymaState.ERROR:
        first, maximum = settings.RECONCILE_ERROR_BACKOFF
        return min(maximum, first * 2 ** max(0, error_streak - 1))
    return settings.RECONCILE_PROCESSING_INTERVAL


def runtime_status(kyma: Kyma) -> dict:
    """The Kyma's status as the runtime's Kyma shows it: the whole of it, as upstream copies it
    (``remoteKyma.Status = kcpKyma.Status``), exactly what the control plane's Kyma document
    says (state, conditions, the modules with their message and ``maintenance: true`` while a
    new version waits for the window, the last operation, the active channel); what it lacks is
    sent as null, so the merge patch removes it from the runtime's copy too. Mandatory modules
    are not in it (upstream's rule)."""
    shown = KymaKind().to_document(kyma)["status"]
    return {**dict.fromkeys(RUNTIME_STATUS_FIELDS), **shown}


RUNTIME_STATUS_FIELDS = ("state", "conditions", "lastOperation", "modules", "activeChannel")


def _count_throttling(ctx: ReconcileContext) -> None:
    """Requests of this reconcile that waited for the runtime client's rate limit, added to the
    fleet-wide totals (only when some did: a reconcile within the limit writes nothing)."""
    counts = ctx.client.counts if ctx.client is not None else None
    if counts is not None and counts.throttled:
        count(THROTTLED_REQUESTS, counts.throttled)
        count(THROTTLED_MILLISECONDS, round(counts.waited * 1000))


def finish(ctx: ReconcileContext) -> Outcome:
    """Compute the state and write the status, only if something changed."""
    kyma = ctx.kyma
    state = derive_state(ctx)
    conditions = merged_conditions(kyma.conditions, ctx, kyma.generation)
    # When the runtime could not be read, what was known about its modules stays as it was.
    reached = bool(ctx.modules) or not ctx.fatal
    module_status = [m.status() for m in ctx.modules] if reached else kyma.module_status
    owned = modules.owned_resources(ctx) if reached else kyma.owned_module_resources
    changed = (
        state != kyma.state
        or comparable(conditions) != comparable(kyma.conditions)
        or module_status != kyma.module_status
        or owned != kyma.owned_module_resources
        or kyma.observed_generation != kyma.generation
        or kyma.active_channel != kyma.channel
    )
    streak = kyma.error_streak + 1 if state == KymaState.ERROR else 0
    next_at = ctx.now + dt.timedelta(seconds=next_interval(state, streak))
    if ctx.recheck_at is not None:
        next_at = min(next_at, ctx.recheck_at)
    fields: dict = {}  # the Kyma's status: only when it changed
    if changed:
        message = ctx.fatal or "; ".join(ctx.messages) or f"reconciled: {state}"
        fields.update(
            state=state,
            conditions=conditions,
            module_status=module_status,
            owned_module_resources=owned,
            observed_generation=kyma.generation,
            active_channel=kyma.channel,
            state_reason=state_reason_of(conditions) if state != KymaState.READY else "",
            status_changed_at=ctx.now,
            last_operation={
                "operation": message[:500],
                "lastUpdateTime": rfc3339(ctx.now),
            },
        )
    if ctx.remote_kyma is not None or ctx.remote_kyma_unread:
        shown = copy.copy(kyma) if fields else kyma  # the Kyma as this write leaves it
        for name, value in fields.items():
            setattr(shown, name, value)
        try:
            runtime_kyma.mirror_status(ctx, ctx.remote_kyma, runtime_status(shown))
        except RuntimeAPIError as exc:
            log.info("could not mirror the status into the runtime of %s: %s", kyma.key, exc.message)
    synced: dict = {}  # RuntimeSync: only what moved (a no-op writes none of it)
    if ctx.verified != (ctx.sync.runtime_verified or {}):  # (the mirror notes what it wrote there)
        synced["runtime_verified"] = ctx.verified
    if ctx.sync.applied_watchers != ctx.synced_watchers:
        synced["applied_watchers"] = ctx.sync.applied_watchers
    _count_throttling(ctx)
    if reached:
        _note_module_states(ctx, kyma.module_status, module_status)
    # The schedule and the lease in one UPDATE of the Kyma's ReconcileState row (none if the lease
    # was lost); the status and the sync rows only when they moved, in the same transaction. A
    # no-op writes that one row: never the Kyma row an operator edits.
    with transaction.atomic() if fields or synced else contextlib.nullcontext():
        if not queue.reconcile_finished(
            kyma.pk, owner=ctx.lease_owner, ran_at=ctx.now, next_at=next_at, error_streak=streak
        ):
            raise LeaseLost(f"lease of Kyma {kyma.key} lost")
        if fields:
            Kyma.objects.filter(pk=kyma.pk).update(**fields)
        if synced:
            row_write(RuntimeSync, kyma.pk, **synced)
    for name, value in fields.items():
        setattr(kyma, name, value)
    for name, value in synced.items():
        setattr(ctx.sync, name, value)
    schedule = row_or_default(kyma, "reconcile_state")
    schedule.last_reconcile_at, schedule.next_reconcile_at, schedule.error_streak = ctx.now, next_at, streak
    schedule.lease_owner, schedule.lease_until = "", None
    counts = ctx.client.counts if ctx.client is not None else None
    return Outcome(
        state,
        counts.writes if counts else 0,
        ctx.fatal or "; ".join(ctx.messages),
        changes=tuple(ctx.changes),
        drift=tuple(ctx.drift),
        lease_released=bool(ctx.lease_owner),
    )


def _note_module_states(ctx: ReconcileContext, before: list, after: list) -> None:
    """A module whose state moved (``keda: Processing → Ready``) goes into the timeline."""
    old = {m.get("name"): m.get("state") for m in before or () if isinstance(m, dict)}
    for module in after:
        previous = old.get(module["name"])
        if module["name"] in old and previous != module.get("state"):
            ctx.change("module-state", module=module["name"], before=previous, after=module.get("state"))
        elif module["name"] not in old:
            ctx.change("module-state", module=module["name"], before=None, after=module.get("state"))
