"""Shared steps of the reconciler tests."""

from __future__ import annotations

import datetime as dt

from django.utils import timezone

from fleet import queue
from fleet.models import Kyma, ReconcileRecord
from reconciler.run import kyma_reconcile_run
from tests.factories import beside

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


def heartbeat(kyma: Kyma, at: dt.datetime | None = None) -> None:
    """What the listener stores when the runtime watcher says it is alive."""
    beside(kyma.pk, watcher_last_seen_at=at or timezone.now())


def run(kyma: Kyma, reason: str, *, full: bool = True) -> Kyma:
    """A reconcile as a request queues it: its mark says whether to read everything (a request
    made before joins that mark, as it would have joined the queued task)."""
    now = timezone.now()
    queue.flags().claim([kyma.pk], now, now, full=full)
    kyma_reconcile_run(kyma.pk, reason=reason)
    kyma.refresh_from_db()
    return kyma
