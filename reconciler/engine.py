"""``kyma_reconcile``: make what a Kyma says true in its runtime (level-based, idempotent).

Desired state comes from the database, actual state from the runtime; only differences are
written to the runtime, and the Kyma's status is written once at the end, and only when it
changed. Steps, in order: the runtime's namespace and Kyma CRD, the runtime's Kyma (both ways),
the runtime watcher (certificate, Secret, Service, Deployment, webhooks), modules, the module
catalog's mirror, SyncResources: the registry's steps in their order (:mod:`.steps`).
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

from . import deletion, pause
from .context import FALSE, ReconcileContext
from .status import Outcome, finish, with_finalizer
from .steps import REGISTRY

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
    steps = REGISTRY.in_order()
    for step in steps:
        if step.ahead is not None:
            step.ahead(ctx)
    for step in steps:
        ctx.ahead.drop(step.name)  # (what no earlier wave took, the step makes itself)
        step.sync(ctx)
        ctx.step()
    if ctx.changed_configs:
        current_app.send_task(NOTIFY_TASK, args=[ctx.changed_configs])
    ctx.remote_kyma, ctx.remote_kyma_unread = ctx.runtime_kyma, ctx.runtime_kyma is None


def reads_everything(kyma: Kyma, scope: Scope, named: Collection[ObjectKey]) -> bool:
    """Whether a reconcile reads and repairs every kind the control plane owns in the runtime,
    whatever was verified when: a full one (a user's "reconcile now", a job, an event that did
    not say what changed), one after a spec change the runtime has not seen reconciled, and one
    whose events named an object the control plane owns there (the runtime's Kyma, a
    PriorityClass, a NetworkPolicy: :mod:`.steps`), not a module CR (the user's)."""
    if scope == Scope.FULL or kyma.generation != kyma.observed_generation:
        return True
    return any(
        (owner := REGISTRY.owner_of(api_version, kind, name)) is not None and owner.name != "modules"
        for api_version, kind, _, name in named
    )


def kyma_reconcile(
    kyma: Kyma,
    *,
    heartbeat: object = None,
    now: dt.datetime | None = None,
    lease_owner: str = "",
    scope: Scope = Scope.FULL,
    named: Collection[ObjectKey] = (),
    seen: Mapping[ObjectKey, dict[str, Any] | None] | None = None,
    shared: Any = None,
) -> Outcome:
    """Reconcile one Kyma; the caller holds its lease (``heartbeat`` extends it between steps; with
    ``lease_owner`` the final status write releases it: see ``Outcome.lease_released``).

    ``named``: the runtime objects its events said changed; ``seen``: those of them read moments
    ago, once their change was stored (:mod:`.stored`), not read again. ``shared``: a batch's
    reads (:mod:`.shared`), made once for all its Kymas. Every reconcile reads the
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
    ctx = ReconcileContext(
        kyma=kyma, now=now or timezone.now(), heartbeat=heartbeat, lease_owner=lease_owner, shared=shared
    )
    ctx.listed.update(seen or {})
    ctx.named = {*named, *(seen or {})}
    ctx.full = reads_everything(kyma, scope, ctx.named)
    ctx.events_trusted = not ctx.full and watcher_heard_recently(kyma.watcher_last_seen_at, ctx.now)
    # (another kubeconfig: what was seen is of another cluster, so nothing is left to beat's sweep)
    ctx.targeted = ctx.events_trusted and scope == Scope.TARGETED and ctx.same_cluster
    try:
        return _run(ctx)
    finally:
        if ctx.client is not None:
            ctx.client.keep_one_connection()  # (calls made at once opened more: fleet.k8s.parallel)


def _run(ctx: ReconcileContext) -> Outcome:
    kyma = ctx.kyma
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
