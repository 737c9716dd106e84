"""``kyma_reconcile``: make what a Kyma says true in its runtime (level-based, idempotent).

Desired state comes from the database, actual state from the runtime; only differences are
written to the runtime, and the Kyma's status is written once at the end, and only when it
changed. Steps, in order: the runtime's namespace and Kyma CRD, the runtime's Kyma (both ways),
the runtime watcher (certificate, Secret, Service, Deployment, webhooks), modules, SyncResources.
A Kyma being deleted runs the cleanup instead (see :mod:`.deletion`).
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass

from django.conf import settings
from django.utils import timezone

from fleet.k8s.client import Permanent, RuntimeAPIError, Temporary, client_for
from fleet.models import Kyma, KymaState

from . import deletion, modules, runtime_kyma, sync_resources, watcher_heartbeat, watcher_resources
from .context import FALSE, TRUE, ReconcileContext, comparable, derive_state, merged_conditions

log = logging.getLogger(__name__)

FINALIZER = "operator.kyma-project.io/kyma"


@dataclass(frozen=True)
class Outcome:
    state: str
    runtime_writes: int
    runtime_reads: int
    status_written: bool
    message: str = ""


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


def _runtime_steps(ctx: ReconcileContext) -> None:
    kyma = ctx.kyma
    if FINALIZER not in kyma.finalizers:
        # Before the first write into the runtime: deleting the Kyma must clean it up.
        kyma.finalizers = [*kyma.finalizers, FINALIZER]
        Kyma.objects.filter(pk=kyma.pk).update(finalizers=kyma.finalizers)
    runtime_kyma.ensure_crd(ctx)
    live = runtime_kyma.sync(ctx)
    ctx.condition("Runtime", TRUE, "Reachable", "the runtime's API server answers")
    ctx.step()
    watchers = watcher_resources.active_watchers()
    watcher_resources.sync(ctx, watchers)
    watcher_heartbeat.evaluate(ctx)
    ctx.step()
    changed_configs = modules.sync(ctx)
    ctx.step()
    sync_resources.sync(ctx)
    if changed_configs:
        from fleet.tasks import notify_module_managers

        notify_module_managers.delay(changed_configs)
    ctx.remote_kyma = live


def _status_for_runtime(state: str, ctx: ReconcileContext) -> dict:
    return {
        "state": state,
        "activeChannel": ctx.kyma.channel,
        "modules": [
            {"name": m.name, "state": m.state, **({"version": m.version} if m.version else {})}
            for m in ctx.modules
        ],
    }


def kyma_reconcile(kyma: Kyma, *, heartbeat: object = None, now: dt.datetime | None = None) -> Outcome:
    """Reconcile one Kyma; the caller holds its lease (``heartbeat`` extends it between steps)."""
    ctx = ReconcileContext(kyma=kyma, now=now or timezone.now(), heartbeat=heartbeat)
    if kyma.is_deleting:
        return deletion.run(ctx)
    if not kyma.kubeconfig:
        ctx.condition("Runtime", FALSE, "NoKubeconfig", "no kubeconfig: the runtime cannot be reached")
        ctx.fatal = "no kubeconfig"
    else:
        try:
            ctx.client = client_for(kyma.pk, kyma.kubeconfig)
            ctx.client.reset_counts()
            _runtime_steps(ctx)
        except Temporary as exc:
            ctx.condition("Runtime", FALSE, "Unreachable", exc.message)
            ctx.fatal = exc.message
        except Permanent as exc:
            ctx.condition("Runtime", FALSE, "Refused", exc.message)
            ctx.fatal = exc.message
        except RuntimeAPIError as exc:  # pragma: no cover - all subclasses are handled above
            ctx.fatal = exc.message
    return finish(ctx)


def finish(ctx: ReconcileContext) -> Outcome:
    """Compute the state and write the status, only if something changed."""
    kyma = ctx.kyma
    state = derive_state(ctx)
    conditions = merged_conditions(kyma.conditions, ctx, kyma.generation)
    # When the runtime could not be read, what was known about its modules stays as it was.
    reached = bool(ctx.modules) or not ctx.fatal
    module_status = [m.status() for m in ctx.modules] if reached else kyma.module_status
    if ctx.remote_kyma is not None:
        try:
            runtime_kyma.mirror_status(ctx, ctx.remote_kyma, _status_for_runtime(state, ctx))
        except RuntimeAPIError as exc:
            log.info("could not mirror the status into the runtime of %s: %s", kyma.key, exc.message)
    changed = (
        state != kyma.state
        or comparable(conditions) != comparable(kyma.conditions)
        or module_status != kyma.module_status
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
    if changed:
        message = ctx.fatal or "; ".join(ctx.messages) or f"reconciled: {state}"
        fields.update(
            state=state,
            conditions=conditions,
            module_status=module_status,
            observed_generation=kyma.generation,
            active_channel=kyma.channel,
            last_operation={
                "operation": message[:500],
                "lastUpdateTime": ctx.now.strftime("%Y-%m-%dT%H:%M:%SZ"),
            },
        )
    Kyma.objects.filter(pk=kyma.pk).update(**fields)
    for name, value in fields.items():
        setattr(kyma, name, value)
    counts = ctx.client.counts if ctx.client is not None else None
    return Outcome(
        state,
        counts.writes if counts else 0,
        counts.reads if counts else 0,
        changed,
        ctx.fatal or "; ".join(ctx.messages),
    )
