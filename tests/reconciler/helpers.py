"""Shared steps of the reconciler tests."""

from __future__ import annotations

from fleet.models import Kyma, ReconcileRecord
from reconciler.run import kyma_reconcile_run

# A manifest a module manager might hand back (format with name and level).
CONFIGMAP = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: {name}
  namespace: kyma-system
data:
  level: "{level}"
"""


def reconcile(kyma: Kyma) -> ReconcileRecord | None:
    kyma_reconcile_run(kyma.pk)
    if not Kyma.objects.filter(pk=kyma.pk).exists():
        return None
    kyma.refresh_from_db()
    return ReconcileRecord.objects.filter(kyma_id=kyma.pk).order_by("-id").first()


def conditions(kyma: Kyma) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in kyma.conditions}
