"""Celery tasks of the core domain: thin, id-based, explicitly named (they are an API)."""

from __future__ import annotations

import logging

from celery import Task, shared_task
from django.conf import settings
from django.db import OperationalError

from fleet import selectors
from fleet.selectors import kyma_ids_all
from fleet.services import notifications, reconcile_queue
from fleet.services.notifications import NotifyFailed
from fleet.services.reconcile import RetryLater, kyma_reconcile_run

log = logging.getLogger(__name__)


@shared_task(name="controlplane.kyma_reconcile", bind=True, acks_late=True, max_retries=None)
def kyma_reconcile(self: Task, kyma_id: int) -> None:
    """Reconcile one Kyma. Retries shortly when another worker holds its lease or the Kyma was
    reconciled moments ago (``RECONCILE_MIN_SPACING``), and with backoff while the database is
    unavailable (runtime errors are outcomes, rescheduled by state)."""
    try:
        kyma_reconcile_run(kyma_id, min_spacing=settings.RECONCILE_MIN_SPACING)
    except RetryLater as later:
        raise self.retry(countdown=later.retry_after) from None
    except OperationalError as exc:
        raise self.retry(countdown=min(60, 2 ** min(self.request.retries, 6)), max_retries=20) from exc


@shared_task(name="controlplane.reconcile_due", acks_late=True, ignore_result=True)
def reconcile_due() -> int:
    """Beat's sweep: queue the Kymas whose periodic reconcile is due (queued ones coalesce)."""
    queued = 0
    for batch in selectors.kyma_ids_due(limit=settings.RECONCILE_SWEEP_LIMIT):
        queued += len(reconcile_queue.kyma_reconcile_request(batch, reason="periodic"))
    return queued


@shared_task(name="controlplane.watcher_silence_check")
def watcher_silence_check() -> int:
    """Beat: reconcile Ready Kymas whose runtime watcher fell silent, so they show it at once
    (a Ready Kyma would otherwise wait for its next periodic reconcile)."""
    queued = 0
    for batch in selectors.kyma_ids_watcher_silent(limit=settings.RECONCILE_SWEEP_LIMIT):
        queued += len(reconcile_queue.kyma_reconcile_request(batch, reason="watcher-silent"))
    return queued


@shared_task(
    name="controlplane.notify_module_managers",
    acks_late=True,
    autoretry_for=(NotifyFailed,),
    retry_backoff=1,
    retry_backoff_max=120,
    retry_jitter=True,
    max_retries=8,
)
def notify_module_managers(config_ids: list[int]) -> int:
    """Tell module managers their ModuleConfigs changed (retried with backoff until they confirm)."""
    return sum(1 for config_id in config_ids if notifications.module_manager_notify(config_id=config_id))


@shared_task(name="controlplane.kyma_reconcile_fanout", acks_late=True)
def kyma_reconcile_fanout(reason: str) -> int:
    """Request a reconcile of every Kyma, in batches (a Watcher change concerns all runtimes)."""
    queued = 0
    for batch in kyma_ids_all():
        queued += len(reconcile_queue.kyma_reconcile_request(batch, reason=reason))
    log.info("fan-out (%s): %d reconcile(s) queued", reason, queued)
    return queued


@shared_task(name="controlplane.housekeeping", acks_late=True, ignore_result=True)
def housekeeping() -> None:
    """Bound the event and reconcile records (the newest N per Kyma stay)."""
    from django.conf import settings

    from fleet.models import ReconcileRecord
    from fleet.services.housekeeping import prune_per_kyma
    from listener.models import WatchEventRecord

    events = prune_per_kyma(WatchEventRecord, keep=settings.LISTENER_EVENTS_KEPT, order_field="received_at")
    reconciles = prune_per_kyma(
        ReconcileRecord, keep=settings.RECONCILE_RECORDS_KEPT, order_field="started_at"
    )
    if events or reconciles:
        log.info("housekeeping: %d event record(s) and %d reconcile record(s) pruned", events, reconciles)


from fleet.jobs import tasks as _jobs_tasks  # noqa: E402, F401
