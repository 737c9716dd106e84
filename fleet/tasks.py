"""Celery tasks of the fleet domain: thin, id-based, explicitly named (they are an API). Beat's
sweeps queue reconciles by publishing ``controlplane.kyma_reconcile``, which the reconciler above
defines (``reconciler.tasks``)."""

from __future__ import annotations

import datetime as dt
import logging

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from fleet import notifications, queue, selectors
from fleet.jobs import tasks as jobs_tasks  # noqa: F401 - registers the jobs task
from fleet.models import ReconcileRecord
from fleet.notifications import NotifyFailed
from fleet.rollouts.engine import rollouts_advance as rollouts_advance_run
from fleet.selectors import kyma_ids_all
from fleet.services.housekeeping import prune_per_kyma
from fleet.services.revisions import moduleconfig_deletions_prune

log = logging.getLogger(__name__)


@shared_task(name="controlplane.reconcile_due", acks_late=True, ignore_result=True)
def reconcile_due() -> int:
    """Beat's sweep: queue the Kymas whose periodic reconcile is due (queued ones coalesce)."""
    queued = 0
    for batch in selectors.kyma_ids_due(limit=settings.RECONCILE_SWEEP_LIMIT):
        queued += len(queue.request(batch, reason=queue.PERIODIC_REASON, full=False))
    # Marks whose task was lost (its publisher or its worker died): their events were answered.
    queued += len(
        queue.requeue_overdue(after=settings.RECONCILE_OVERDUE_AFTER, limit=settings.RECONCILE_SWEEP_LIMIT)
    )
    # Reconciles that died with their worker after they cleared their mark: a lease left to run out.
    abandoned = queue.lease_abandoned_take(limit=settings.RECONCILE_SWEEP_LIMIT)
    if abandoned:
        log.warning("%d reconcile(s) died with their worker (lease ran out); queued again", len(abandoned))
        queued += len(queue.request(abandoned, reason="lease-abandoned"))
    # Every few seconds: worth a line only when it queued something.
    log.log(logging.INFO if queued else logging.DEBUG, "periodic sweep: %d reconcile(s) queued", queued)
    return queued


@shared_task(name="controlplane.watcher_silence_check")
def watcher_silence_check() -> int:
    """Beat: reconcile Ready Kymas whose runtime watcher fell silent, so they show it at once
    (a Ready Kyma would otherwise wait for its next periodic reconcile)."""
    queued = 0
    for batch in selectors.kyma_ids_watcher_silent(limit=settings.RECONCILE_SWEEP_LIMIT):
        queued += len(queue.request(batch, reason="watcher-silent"))
    log.log(logging.INFO if queued else logging.DEBUG, "silent-watcher sweep: %d reconcile(s) queued", queued)
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


@shared_task(name="controlplane.rollouts_advance", acks_late=True, ignore_result=True)
def rollouts_advance() -> int:
    """Beat: judge the current wave of every rollout under way and start the next when its gate
    passed (``fleet.rollouts.engine``)."""
    return rollouts_advance_run()


@shared_task(name="controlplane.kyma_reconcile_fanout", acks_late=True)
def kyma_reconcile_fanout(reason: str) -> int:
    """Request a reconcile of every Kyma, in batches (a Watcher change concerns all runtimes)."""
    queued = 0
    for batch in kyma_ids_all():
        queued += len(queue.request(batch, reason=reason))
    log.info("fan-out (%s): %d reconcile(s) queued", reason, queued)
    return queued


@shared_task(name="controlplane.housekeeping", acks_late=True, ignore_result=True)
def housekeeping() -> None:
    """Bound the reconcile records (the newest N per Kyma stay; listener prunes its events)."""
    pruned = prune_per_kyma(ReconcileRecord, keep=settings.RECONCILE_RECORDS_KEPT, order_field="started_at")
    if pruned:
        log.info("housekeeping: %d reconcile record(s) pruned", pruned)
    kept = dt.timedelta(days=settings.MODULECONFIG_DELETIONS_KEPT_DAYS)
    tombstones = moduleconfig_deletions_prune(older_than=timezone.now() - kept)
    if tombstones:
        log.info("housekeeping: %d ModuleConfig deletion record(s) pruned", tombstones)
