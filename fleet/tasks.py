"""Celery tasks of the core domain: thin, id-based, explicitly named (they are an API)."""

from __future__ import annotations

import datetime as dt
import logging

from celery import Task, shared_task
from django.conf import settings
from django.db import OperationalError
from django.utils import timezone

from fleet import notifications, queue, selectors
from fleet.jobs import tasks as jobs_tasks  # noqa: F401 - registers the jobs task
from fleet.models import ReconcileRecord
from fleet.notifications import NotifyFailed
from fleet.reconciler.run import kyma_reconcile_run
from fleet.rollouts.engine import rollouts_advance as rollouts_advance_run
from fleet.selectors import kyma_ids_all
from fleet.services.housekeeping import prune_per_kyma
from fleet.services.revisions import moduleconfig_deletions_prune

log = logging.getLogger(__name__)
# Longest wait between a reconcile's tries while the database is unavailable (seconds).
DATABASE_RETRY_MAX = 5


@shared_task(name="controlplane.kyma_reconcile", bind=True, acks_late=True, max_retries=None)
def kyma_reconcile(
    self: Task,
    kyma_id: int,
    reason: str = "",
    urgent: bool = False,
    marked: bool = True,
    busy: int = 0,
) -> None:
    """Reconcile one Kyma (``reason``: why it was requested, for the log). Retries shortly when
    another worker holds its lease or the Kyma was reconciled moments ago
    (``RECONCILE_MIN_SPACING``; not for ``urgent`` requests, made by the control plane), and with
    backoff while the database is unavailable (runtime errors are outcomes, rescheduled by
    state). ``marked=False``: the task holds no queue mark (:mod:`fleet.queue.requests`);
    ``busy``: its runtime keeps changing, and this is its try for one of the few slots such
    reconciles share (:mod:`fleet.reconciler.run`)."""
    try:
        kyma_reconcile_run(
            kyma_id,
            min_spacing=settings.RECONCILE_MIN_SPACING,
            reason=reason,
            urgent=urgent,
            marked=marked,
            busy=busy,
        )
    except queue.RetryLater as later:
        kwargs: dict = {"reason": reason}
        if urgent:
            kwargs.update(urgent=True, marked=later.marked)
        if busy:  # counts the tries that found no slot
            kwargs["busy"] = busy + 1 if isinstance(later, queue.NoBusySlot) else busy
        # Published again, rather than ``self.retry()``: Celery handles a Retry as an error (it
        # builds the traceback's whole description), and under a storm of edits these tries
        # come by the dozen per second (bench/module_chain.py). This one is acked once it is out.
        self.apply_async(args=[kyma_id], kwargs=kwargs, countdown=later.retry_after)
        return
    except OperationalError as exc:
        # The database is away: retry soon and often (an outage is usually seconds), for about
        # ten minutes; after that beat's sweep and the mark's expiry queue the Kyma again.
        countdown = min(DATABASE_RETRY_MAX, 2 ** min(self.request.retries, 6))
        log.warning(
            "reconcile of Kyma %s: database unavailable (%s); retrying in %d s", kyma_id, exc, countdown
        )
        raise self.retry(countdown=countdown, max_retries=120) from exc


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
