"""Deleting a Kyma: clean its runtime up first, in order, then let the row go.

Order: the SyncResources' objects (unless Orphan), the module CRs the control plane created, the
mirrored module catalog, the runtime watcher (webhooks first), the Kyma's certificates, the
runtime's Kyma; then the finalizer is removed and the row deleted. An unreachable runtime keeps
the Kyma in Deleting (state Error, retried with backoff), exactly as a Kubernetes finalizer would.
"""

from __future__ import annotations

import logging

from fleet.k8s.client import RuntimeAPIError, client_for, client_forget
from fleet.models import Kyma, KymaState
from pki.models import Certificate

from . import catalog, modules, runtime_kyma, sync_resources, watcher_resources
from .context import FALSE, ReconcileContext
from .status import Outcome, finish, without_finalizer

log = logging.getLogger(__name__)


def run(ctx: ReconcileContext) -> Outcome:
    kyma = ctx.kyma
    if without_finalizer(kyma.finalizers) != kyma.finalizers:
        if not kyma.kubeconfig:
            ctx.condition("Runtime", FALSE, "NoKubeconfig", "cannot clean up the runtime: no kubeconfig")
            ctx.fatal = "cannot clean up the runtime: no kubeconfig"
            return finish(ctx)
        try:
            ctx.client = client_for(kyma.pk, kyma.kubeconfig)
            ctx.client.reset_counts()
            cleanup(ctx)
        except RuntimeAPIError as exc:
            ctx.condition("Runtime", FALSE, "CleanupFailed", exc.message)
            ctx.fatal = f"cleanup of the runtime failed: {exc.message}"
            return finish(ctx)
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


def cleanup(ctx: ReconcileContext) -> None:
    sync_resources.remove_all(ctx)
    ctx.step()
    modules.remove_all(ctx)
    catalog.remove(ctx)
    watcher_resources.remove(ctx)
    Certificate.objects.filter(kyma=ctx.kyma).delete()
    ctx.client.delete(runtime_kyma.API_VERSION, "Kyma", runtime_kyma.NAME, runtime_kyma.NAMESPACE)
