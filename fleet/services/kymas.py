"""Writes of Kymas: create/update (apply), kubeconfig, deletion and reconcile requests."""

from __future__ import annotations

from django.db import transaction

from fleet import queue
from fleet.k8s.kubeconfig import validate_kubeconfig
from fleet.models import Kyma
from fleet.models.kyma import MODULE_DEFAULTS
from kernel import audit
from kernel.errors import Conflict
from kernel.services import deletion_begin, resource_save, stored_spec, upsert


def _normalized_modules(modules: list) -> list:
    """Upstream's defaults written out, so the stored spec says what will happen."""
    if not isinstance(modules, list):
        return modules  # the validator reports the wrong type precisely
    return [{**MODULE_DEFAULTS, **m} if isinstance(m, dict) else m for m in modules]


def kyma_save(*, kyma: Kyma, reconcile: bool = True) -> bool:
    """Validate and store a Kyma built or edited by the caller (admin form, apply).

    A spec change bumps ``generation`` and asks for a reconcile (``reconcile=False``: the caller
    is the reconcile, which goes on with the new spec). Returns whether it changed.
    """
    if kyma.is_deleting:
        raise Conflict(f"Kyma {kyma.key} is being deleted; it cannot be changed")
    kyma.modules = _normalized_modules(kyma.modules)
    with transaction.atomic():
        was_paused = _stored_pause(kyma)
        changed = resource_save(kyma, before=stored_spec(kyma))
        if changed and reconcile:
            queue.request([kyma.pk], reason="spec changed", urgent=True)
        elif was_paused is not None and was_paused != kyma.skip_reconciliation:
            # Labels are not spec: only this one matters to the reconcile (resume, or record the pause).
            queue.request([kyma.pk], reason="skip-reconciliation label changed", urgent=True)
    return changed


def _stored_pause(kyma: Kyma) -> bool | None:
    """Whether the stored Kyma is paused (``None`` for a new one)."""
    if kyma.pk is None:
        return None
    labels = Kyma.objects.filter(pk=kyma.pk).values_list("labels", flat=True).first()
    return Kyma(labels=labels or {}).skip_reconciliation


@transaction.atomic
def kyma_apply(
    *,
    namespace: str,
    name: str,
    runtime_id: str,
    skr_domain: str = "",
    channel: str = "regular",
    modules: list | None = None,
    skip_maintenance_windows: bool = False,
    labels: dict | None = None,
    annotations: dict | None = None,
) -> tuple[Kyma, bool]:
    """Create the Kyma ``namespace/name`` or make the stored one match. Returns (kyma, created)."""
    fields = {
        "runtime_id": runtime_id,
        "skr_domain": skr_domain,
        "channel": channel,
        "modules": modules if modules is not None else [],
        "skip_maintenance_windows": skip_maintenance_windows,
        "labels": labels or {},
        "annotations": annotations or {},
    }
    return upsert(Kyma, {"namespace": namespace, "name": name}, fields, lambda kyma: kyma_save(kyma=kyma))


def kyma_set_kubeconfig(*, kyma: Kyma, kubeconfig: str) -> None:
    """Store (or clear, with ``""``) the runtime's kubeconfig, encrypted; reconcile with it."""

    if kubeconfig:
        validate_kubeconfig(kubeconfig)
    with transaction.atomic():
        was = audit.REDACTED_SET if kyma.kubeconfig else audit.REDACTED_UNSET
        kyma.kubeconfig = kubeconfig
        kyma.save(update_fields=["kubeconfig", "updated_at"])
        now = "<replaced, redacted>" if kubeconfig else audit.REDACTED_UNSET
        audit.record_object(
            kyma, action="update", changes=[{"field": "kubeconfig", "before": was, "after": now}]
        )
        queue.request([kyma.pk], reason="kubeconfig changed", urgent=True)


def kyma_delete(*, kyma: Kyma) -> bool:
    """Begin deleting a Kyma. Returns True when it is gone at once (nothing to clean up).

    Otherwise the Kyma enters state Deleting and its reconcile removes what it put into the
    runtime before the row goes.
    """
    with transaction.atomic():
        if deletion_begin(kyma):
            return True
        Kyma.objects.filter(pk=kyma.pk).update(state="Deleting")
        kyma.state = "Deleting"
        queue.request([kyma.pk], reason="deletion", urgent=True)
    return False
