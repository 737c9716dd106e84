"""Deleting a Kyma: clean its runtime up first, in order, then let the row go.

The registry's steps remove what they own in their removal order (:mod:`.steps`): the module CRs
the control plane created first (their operators, the SyncResources' objects, stay in place and
clean up while a finalizer holds a CR: the deletion waits for them), then the SyncResources'
objects (unless Orphan), the mirrored module catalog, the runtime watcher (webhooks first), the
runtime's Kyma; then the Kyma's certificates go, the finalizer is removed and the row deleted.

**Purge** (upstream's purge controller, ``purge-finalizer-timeout``): what a finalizer still holds
``KYMA_PURGE_AFTER`` (5 min) after the deletion began, an operator that will never finish (its
pod gone, its module removed) or a finalizer nobody owns, is purged: its finalizers are removed
so it goes, and the deletion goes on. The Kyma's ``Deletion`` condition says what it waits for
and when the purge starts, its timeline what the purge removed (and
``lifecycle_mgr_purgectrl_requests_total`` counts purges). Kinds listed in ``KYMA_PURGE_SKIP``
(upstream's ``skip-finalizer-purging-for``) are never purged: the deletion waits for them.

An unreachable runtime keeps the Kyma in Deleting (state Error, retried with backoff), exactly as
a Kubernetes finalizer would; a runtime gone for good is let go by an operator's deliberate
"forget" (``fleet.services.deletion.kyma_forget_runtime``, recorded in the audit trail).
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import logging

from django.conf import settings

from fleet.k8s.client import RuntimeAPIError, client_for, client_forget
from fleet.models import Kyma, KymaState
from fleet.models.records import PURGES
from fleet.services.counters import count
from kernel.timefmt import display
from pki.models import Certificate

from .context import FALSE, TRUE, ReconcileContext
from .status import Outcome, finish, without_finalizer
from .steps import REGISTRY

log = logging.getLogger(__name__)

CONDITION = "Deletion"
# How soon a deletion that waits for a finalizer looks again.
WAIT_INTERVAL = dt.timedelta(seconds=10)

Leftover = tuple[str, str, str, str]  # apiVersion, kind, namespace, name


def run(ctx: ReconcileContext) -> Outcome:
    kyma = ctx.kyma
    if without_finalizer(kyma.finalizers) != kyma.finalizers:
        if not kyma.kubeconfig:
            message = "cannot clean up the runtime: no kubeconfig (an operator may forget the runtime)"
            ctx.condition("Runtime", FALSE, "NoKubeconfig", message)
            ctx.fatal = message
            return finish(ctx)
        try:
            ctx.client = client_for(kyma.pk, kyma.kubeconfig)
            ctx.client.reset_counts()
            done = cleanup(ctx)
        except RuntimeAPIError as exc:
            ctx.condition("Runtime", FALSE, "CleanupFailed", exc.message)
            ctx.fatal = f"cleanup of the runtime failed: {exc.message}"
            return finish(ctx)
        if not done:
            return finish(ctx)
        Certificate.objects.filter(kyma=ctx.kyma).delete()
        kyma.finalizers = without_finalizer(kyma.finalizers)
        Kyma.objects.filter(pk=kyma.pk).update(finalizers=kyma.finalizers)
    writes = ctx.client.counts.writes if ctx.client is not None else 0
    if not kyma.finalizers:
        log.info("Kyma %s cleaned up and deleted", kyma.key)
        kyma_id = kyma.pk
        kyma.delete()
        client_forget(kyma_id)
        return Outcome(KymaState.DELETING, writes, "deleted", kyma_deleted=True)
    ctx.messages.append("waiting for other finalizers: " + ", ".join(kyma.finalizers))
    return finish(ctx)


def purge_at(kyma: Kyma) -> dt.datetime:
    """When what a finalizer still holds in the runtime is purged (``KYMA_PURGE_AFTER``)."""
    begun = kyma.deletion_timestamp or kyma.updated_at
    return begun + dt.timedelta(seconds=settings.KYMA_PURGE_AFTER)


def cleanup(ctx: ReconcileContext) -> bool:
    """Each step removes what it owns, in removal order; True when the runtime holds nothing of
    ours any more. A step whose objects a finalizer still holds stops the cleanup there (what
    comes after it, e.g. the module's operator after its CR, stays in place) until they go, or
    the purge removes their finalizers (:func:`_purged`)."""
    for step in REGISTRY.in_removal_order():
        left = step.remove(ctx)
        ctx.step()
        if left:
            _purged(ctx, left)
            return False
    ctx.condition(CONDITION, TRUE, "CleanedUp", "the runtime holds nothing of the control plane's any more")
    return True


def _purged(ctx: ReconcileContext, left: list[Leftover]) -> None:
    """What a finalizer holds: waited for until the grace period is over, then purged (its
    finalizers removed). The purge is a reconcile of its own (its record and the ``Deletion``
    condition say what it removed); the next one, moments later, goes on with the cleanup."""
    held = ", ".join(_where(item) for item in left)
    when = purge_at(ctx.kyma)
    skipped = [_where(item) for item in left if _skipped(ctx, item)]
    if skipped:
        why = (
            f"waiting for {held} to go (a finalizer holds it; KYMA_PURGE_SKIP keeps "
            f"{', '.join(skipped)} from a purge)"
        )
        ctx.condition(CONDITION, FALSE, "WaitingForFinalizers", why)
        ctx.messages.append(why)
        ctx.recheck(ctx.now + WAIT_INTERVAL)
        return
    if ctx.now < when:
        why = (
            f"waiting for {held} to go (a finalizer holds it); purge starts {display(when)} "
            "(KYMA_PURGE_AFTER)"
        )
        ctx.condition(CONDITION, FALSE, "WaitingForFinalizers", why)
        ctx.messages.append(why)
        ctx.recheck(min(when + dt.timedelta(seconds=1), ctx.now + WAIT_INTERVAL))
        return
    for api_version, kind, namespace, name in left:
        if ctx.client.remove_finalizers(api_version, kind, name, namespace or None):
            ctx.change(
                "removed",
                resource=_where((api_version, kind, namespace, name)),
                action="purged (finalizers removed)",
            )
    count(PURGES)
    why = (
        f"purged {display(ctx.now)}: the finalizers of {held} removed "
        f"({settings.KYMA_PURGE_AFTER} s into the deletion); the deletion goes on"
    )
    ctx.condition(CONDITION, FALSE, "Purged", why)
    ctx.messages.append(why)
    ctx.recheck(ctx.now + dt.timedelta(seconds=1))
    log.info("Kyma %s: %s", ctx.kyma.key, why)


def _where(item: Leftover) -> str:
    _, kind, namespace, name = item
    return f"{kind} {namespace}/{name}" if namespace else f"{kind} {name}"


def _skipped(ctx: ReconcileContext, item: Leftover) -> bool:
    """Whether ``KYMA_PURGE_SKIP`` keeps this object from a purge: patterns of CRD names
    (``<plural>.<group>``, e.g. ``*.helm.cattle.io``), as upstream's ``skip-finalizer-purging-for``."""
    if not settings.KYMA_PURGE_SKIP:
        return False
    api_version, kind, _, _ = item
    group = api_version.rpartition("/")[0]
    plural = ctx.client.resource(api_version, kind).plural
    name = f"{plural}.{group}" if group else plural
    return any(fnmatch.fnmatch(name, pattern) for pattern in settings.KYMA_PURGE_SKIP)
