"""Letting go of a runtime that is gone for good.

A Kyma being deleted keeps the control plane's finalizer until its runtime is cleaned up: an
unreachable runtime keeps it in Deleting for ever, as a Kubernetes finalizer would (what a
finalizer holds inside a reachable runtime is purged by the reconcile after ``KYMA_PURGE_AFTER``,
``reconciler.deletion``). When the runtime will never answer again (the cluster was destroyed, its
kubeconfig revoked), an operator forgets it: deliberately, one Kyma at a time, recorded in the
audit trail. Nothing is deleted in the runtime; the Kyma row, its certificates and its records go.
"""

from __future__ import annotations

from django.db import transaction

from fleet.models import Kyma
from fleet.models.kyma import OUR_KYMA_FINALIZERS
from kernel import audit
from kernel.errors import Conflict


def kyma_forget_runtime(*, kyma: Kyma, reason: str = "") -> bool:
    """Drop the control plane's finalizer of a Kyma being deleted without cleaning its runtime up;
    the row goes with it unless another finalizer holds it. True when the row went. A Kyma that
    is not being deleted is refused (delete it first: the cleanup is tried before anyone forgets)."""
    with transaction.atomic():
        locked = Kyma.objects.select_for_update().filter(pk=kyma.pk).first()
        if locked is None:
            return True
        if not locked.is_deleting:
            raise Conflict(
                f"Kyma {locked.key} is not being deleted: delete it first (its runtime is cleaned up "
                "when it can be reached); forget its runtime only when it never will be"
            )
        kept = [name for name in locked.finalizers if name not in OUR_KYMA_FINALIZERS]
        audit.record(
            action="forget-runtime",
            kind="Kyma",
            name=locked.name,
            namespace=locked.namespace,
            uid=str(locked.uid),
            kyma_id=locked.pk,
            changes=[{"field": "finalizers", "before": locked.finalizers, "after": kept}],
            reason=reason[:500],
        )
        if kept:
            Kyma.objects.filter(pk=locked.pk).update(finalizers=kept)
            kyma.finalizers = kept
            return False
        locked.delete()
    return True
