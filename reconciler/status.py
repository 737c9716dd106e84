"""The end of every reconcile: the state, the status written only when it changed, the next time."""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass

from django.conf import settings

from fleet.k8s.client import RuntimeAPIError
from fleet.models import Kyma, KymaState
from fleet.models.kyma import state_reason_of
from kernel.timefmt import rfc3339

from . import modules, runtime_kyma
from .context import LeaseLost, ReconcileContext, comparable, derive_state, merged_conditions

log = logging.getLogger(__name__)

# Upstream's finalizer (capital K), so a Kyma moves between upstream and us as it is. Ours before was
# the lower-case one: a Kyma still carrying it gets upstream's in its place, and deletion honours both.
FINALIZER = "operator.kyma-project.io/Kyma"
LEGACY_FINALIZERS = frozenset({"operator.kyma-project.io/kyma"})
OUR_FINALIZERS = LEGACY_FINALIZERS | {FINALIZER}


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


def _status_for_runtime(state: str, ctx: ReconcileContext) -> dict:
    return {
        "state": state,
        "activeChannel": ctx.kyma.channel,
        "modules": [
            {"name": m.name, "state": m.state, **({"version": m.version} if m.version else {})}
            for m in ctx.modules
        ],
    }


def finish(ctx: ReconcileContext) -> Outcome:
    """Compute the state and write the status, only if something changed."""
    kyma = ctx.kyma
    state = derive_state(ctx)
    conditions = merged_conditions(kyma.conditions, ctx, kyma.generation)
    # When the runtime could not be read, what was known about its modules stays as it was.
    reached = bool(ctx.modules) or not ctx.fatal
    module_status = [m.status() for m in ctx.modules] if reached else kyma.module_status
    owned = modules.owned_resources(ctx) if reached else kyma.owned_module_resources
    if ctx.remote_kyma is not None or ctx.remote_kyma_unread:
        try:
            runtime_kyma.mirror_status(ctx, ctx.remote_kyma, _status_for_runtime(state, ctx))
        except RuntimeAPIError as exc:
            log.info("could not mirror the status into the runtime of %s: %s", kyma.key, exc.message)
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
    fields = {
        "last_reconcile_at": ctx.now,
        "next_reconcile_at": next_at,
        "error_streak": streak,
        "applied_watchers": kyma.applied_watchers,
    }
    if ctx.verified != kyma.runtime_verified:
        fields["runtime_verified"] = ctx.verified
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
    if reached:
        _note_module_states(ctx, kyma.module_status, module_status)
    if ctx.lease_owner:  # one UPDATE for the status and the lease; none if the lease was lost
        fields.update(lease_owner="", lease_until=None)
        if not Kyma.objects.filter(pk=kyma.pk, lease_owner=ctx.lease_owner).update(**fields):
            raise LeaseLost(f"lease of Kyma {kyma.key} lost")
    else:
        Kyma.objects.filter(pk=kyma.pk).update(**fields)
    for name, value in fields.items():
        setattr(kyma, name, value)
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
