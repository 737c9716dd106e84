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
import enum
import logging
from collections.abc import Collection, Mapping
from typing import Any

from celery import current_app
from django.utils import timezone

from fleet.k8s.client import ObjectKey, Permanent, RuntimeAPIError, Temporary, client_for
from fleet.models import Kyma
from fleet.selectors import watcher_heard_recently

from . import (
    catalog,
    deletion,
    modules,
    pause,
    runtime_kyma,
    sync_resources,
    watcher_heartbeat,
    watcher_resources,
)
from .context import FALSE, TRUE, ReconcileContext
from .status import Outcome, finish, with_finalizer

# Published by its stable name: the task module sits above the reconciler.
NOTIFY_TASK = "controlplane.notify_module_managers"

log = logging.getLogger(__name__)


class Scope(enum.StrEnum):
    """How much of the runtime a reconcile reads (see :func:`kyma_reconcile`)."""

    FULL = "full"  # everything: a user's "reconcile now", an event that did not say what changed
    PERIODIC = "periodic"  # beat's sweep
    TARGETED = "targeted"  # every request it covers said what changed


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
    if not watcher_resources.left_as_is(ctx):
        watcher_resources.sync(ctx, watcher_resources.active_watchers())
    watcher_heartbeat.evaluate(ctx)
    ctx.step()
    changed_configs = modules.sync(ctx)
    ctx.step()
    catalog.sync(ctx)
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
    scope: Scope = Scope.FULL,
    named: Collection[ObjectKey] = (),
    seen: Mapping[ObjectKey, dict[str, Any] | None] | None = None,
) -> Outcome:
    """Reconcile one Kyma; the caller holds its lease (``heartbeat`` extends it between steps; with
    ``lease_owner`` the final status write releases it: see ``Outcome.lease_released``).

    ``named``: the runtime objects its events said changed; ``seen``: those of them read moments
    ago, once their change was stored (:mod:`.stored`), not read again. Every reconcile reads the
    objects its events named. How much else it reads, by ``scope``, when the Kyma's runtime
    watcher is alive (heard within ``WATCHER_SILENT_AFTER``) and its spec was reconciled already
    (else it reads everything):

    - ``FULL`` reads everything.
    - ``PERIODIC`` (beat's sweep) trusts the watcher's events: the objects they cover (the
      runtime's Kyma, module CRs) were reported had they changed, so those verified less than
      ``RUNTIME_RECHECK_INTERVAL`` ago are not read again (:mod:`.runtime_kyma`, :mod:`.modules`).
      What no event covers (the runtime watcher's Secret, Deployment and webhooks; the
      SyncResources' objects) it reads, to find drift.
    - ``TARGETED`` (every request it covers said what changed: events that named their change, a
      module manager's SyncResource) trusts the events as ``PERIODIC`` does, and also leaves the
      rest to beat's sweep: a runtime watcher that was Ready is left as it is (an event from it
      just showed it works; a change of its objects on the control plane's side asks for a full
      reconcile), and only SyncResources that changed (or are not all Applied) are applied
      (:mod:`.watcher_resources`, :mod:`.sync_resources`). A module-CR edit then costs no read
      but the CR's own.
    """
    ctx = ReconcileContext(kyma=kyma, now=now or timezone.now(), heartbeat=heartbeat, lease_owner=lease_owner)
    ctx.listed.update(seen or {})
    ctx.named = {*named, *(seen or {})}
    ctx.events_trusted = (
        scope != Scope.FULL
        and kyma.generation == kyma.observed_generation
        and watcher_heard_recently(kyma.watcher_last_seen_at, ctx.now)
    )
    # (another kubeconfig: what was seen is of another cluster, so nothing is left to beat's sweep)
    ctx.targeted = ctx.events_trusted and scope == Scope.TARGETED and ctx.same_cluster
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
