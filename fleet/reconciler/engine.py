"""``kyma_reconcile``: make what a Kyma says true in its runtime (level-based, idempotent).

Desired state comes from the database, actual state from the runtime; only differences are
written to the runtime, and the Kyma's status is written once at the end, and only when it
changed. Steps, in order: the runtime's namespace and Kyma CRD, the runtime's Kyma (both ways),
the runtime watcher (certificate, Secret, Service, Deployment, webhooks), modules, SyncResources.
A Kyma being deleted runs the cleanup instead (see :mod:`.deletion`); a paused one (upstream's
skip-reconciliation label) is left alone (see :mod:`.pause`).
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Mapping
from typing import Any

from celery import current_app
from django.utils import timezone

from fleet.k8s.client import ObjectKey, Permanent, RuntimeAPIError, Temporary, client_for
from fleet.models import Kyma
from fleet.selectors import watcher_heard_recently

from . import deletion, modules, pause, runtime_kyma, sync_resources, watcher_heartbeat, watcher_resources
from .context import FALSE, TRUE, ReconcileContext
from .status import Outcome, finish, with_finalizer

# Published by its stable name: the task module sits above the reconciler.
NOTIFY_TASK = "controlplane.notify_module_managers"

log = logging.getLogger(__name__)


def _runtime_steps(ctx: ReconcileContext) -> None:
    kyma = ctx.kyma
    finalizers = with_finalizer(kyma.finalizers)
    if finalizers != kyma.finalizers:
        # Before the first write into the runtime: deleting the Kyma must clean it up.
        kyma.finalizers = finalizers
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
        current_app.send_task(NOTIFY_TASK, args=[changed_configs])
    ctx.remote_kyma, ctx.remote_kyma_unread = live, live is None


def kyma_reconcile(
    kyma: Kyma,
    *,
    heartbeat: object = None,
    now: dt.datetime | None = None,
    lease_owner: str = "",
    periodic: bool = False,
    seen: Mapping[ObjectKey, dict[str, Any] | None] | None = None,
) -> Outcome:
    """Reconcile one Kyma; the caller holds its lease (``heartbeat`` extends it between steps; with
    ``lease_owner`` the final status write releases it: see ``Outcome.lease_released``).

    A ``periodic`` reconcile (beat's sweep, no event joined it) of a Kyma whose runtime watcher is
    alive (heard within ``WATCHER_SILENT_AFTER``) and whose spec was already reconciled trusts the
    watcher's events: the objects they cover (the runtime's Kyma, module CRs) were reported had
    they changed, so those verified less than ``RUNTIME_RECHECK_INTERVAL`` ago are not read again
    (see :mod:`.runtime_kyma`, :mod:`.modules`). Every other reconcile reads them. ``seen``: runtime
    objects read moments ago (the ones its events named, once their change was stored:
    :mod:`.stored`), not read again."""
    ctx = ReconcileContext(kyma=kyma, now=now or timezone.now(), heartbeat=heartbeat, lease_owner=lease_owner)
    ctx.listed.update(seen or {})
    ctx.events_trusted = (
        periodic
        and kyma.generation == kyma.observed_generation
        and watcher_heard_recently(kyma.watcher_last_seen_at, ctx.now)
    )
    if kyma.is_deleting:
        return deletion.run(ctx)
    if kyma.skip_reconciliation:
        return pause.skip(ctx)
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
