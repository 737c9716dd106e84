"""Running a Kyma reconcile: the queue mark, the lease, the engine, and the record of it."""

from __future__ import annotations

import datetime as dt
import logging
import time
from functools import partial

from django.conf import settings
from django.utils import timezone

from fleet.models import Kyma, ReconcileRecord
from fleet.reconciler import kyma_reconcile
from fleet.reconciler.context import LeaseLost

from .reconcile_queue import lease_acquire, lease_extend, lease_release, reconcile_rearm, reconcile_started

log = logging.getLogger(__name__)


# Longest wait for a "not before" time: it is at most the listener's margin (plus clock skew)
# ahead; anything further is a clock gone wrong, not a reason to block a worker.
MAX_HOLD = 2.0


def _hold(not_before: dt.datetime | None) -> float:
    """Seconds until ``not_before`` (a time from another host: its clock may run behind ours by
    up to ``LISTENER_CLOCK_SKEW``, so that much is added)."""
    if not_before is None:
        return 0.0
    ahead = (not_before - timezone.now()).total_seconds() + settings.LISTENER_CLOCK_SKEW
    return min(max(ahead, 0.0), MAX_HOLD)


class RetryLater(Exception):
    """The reconcile should run, but not now: try again after ``retry_after`` seconds (requests
    meanwhile coalesce into that retry)."""

    def __init__(self, retry_after: float, why: str) -> None:
        super().__init__(f"{why}, retry in {retry_after:.2f}s")
        self.retry_after = retry_after


class LeaseBusy(RetryLater):
    """Another worker reconciles this Kyma right now."""

    def __init__(self, retry_after: float) -> None:
        super().__init__(retry_after, "lease busy")


class TooSoon(RetryLater):
    """The Kyma was reconciled less than ``RECONCILE_MIN_SPACING`` ago."""

    def __init__(self, retry_after: float) -> None:
        super().__init__(retry_after, "reconciled moments ago")


def kyma_reconcile_run(kyma_id: int, *, min_spacing: float = 0.0) -> None:
    """Entry point of the reconcile task; returns quietly when the Kyma is gone.

    With ``min_spacing``, a Kyma whose last reconcile started less than that many seconds ago is
    deferred (:class:`TooSoon`): a runtime that keeps changing gets at most one reconcile per
    spacing, and cannot crowd the rest of the fleet out of the workers. When a request asked the
    reconcile not to read the runtime before some time (an event that arrived just before this
    task was due), it waits until then: at most the listener's margin.
    """
    not_before = reconcile_started(kyma_id)
    hold = _hold(not_before)
    found = list(Kyma.objects.filter(pk=kyma_id).values_list("last_reconcile_at", flat=True)[:1])
    if not found:
        return
    if min_spacing > 0 and found[0] is not None:
        wait = min_spacing - (timezone.now() - found[0]).total_seconds()
        if wait > 0.005:
            wait = max(wait, hold)
            if reconcile_rearm(kyma_id, wait, not_before=not_before):
                raise TooSoon(retry_after=wait)
            return  # another task is queued: it runs after the spacing
    if not lease_acquire(kyma_id):
        wait = max(0.5, hold)
        if reconcile_rearm(kyma_id, wait, not_before=not_before):
            raise LeaseBusy(retry_after=wait)
        return  # another task is queued: it runs after the current holder
    if hold > 0:
        time.sleep(_hold(not_before))
    started_at, started = timezone.now(), time.perf_counter()
    outcome = None
    try:
        kyma = Kyma.objects.filter(pk=kyma_id).first()
        if kyma is not None:
            outcome = kyma_reconcile(kyma, heartbeat=partial(lease_extend, kyma_id))
    except LeaseLost as exc:
        log.warning("%s; the new holder finishes the work", exc)
        return
    finally:
        lease_release(kyma_id)
    if outcome is not None and Kyma.objects.filter(pk=kyma_id).exists():
        ReconcileRecord.objects.create(
            kyma_id=kyma_id,
            started_at=started_at,
            duration_ms=round((time.perf_counter() - started) * 1000),
            state=outcome.state,
            runtime_writes=outcome.runtime_writes,
            message=outcome.message[:2000],
        )
