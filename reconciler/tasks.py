"""The reconcile task: thin, id-based, explicitly named (it is an API: the listener, beat's sweeps
and every write publish ``controlplane.kyma_reconcile`` by that name, through ``fleet.queue``)."""

from __future__ import annotations

import logging

from celery import Task, shared_task
from django.conf import settings
from django.db import OperationalError

from fleet import queue
from reconciler.run import kyma_reconcile_run

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
    reconciles share (:mod:`reconciler.run`)."""
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
