"""When a reconcile task cannot run now: retry later, and how long to hold for a "not before"."""

from __future__ import annotations

import datetime as dt

from django.conf import settings
from django.utils import timezone

# Longest wait for a "not before" time: it is at most the listener's margin (plus clock skew)
# ahead; anything further is a clock gone wrong, not a reason to block a worker.
MAX_HOLD = 2.0


def hold_for(not_before: dt.datetime | None) -> float:
    """Seconds until ``not_before`` (a time from another host: its clock may run behind ours by
    up to ``LISTENER_CLOCK_SKEW``, so that much is added)."""
    if not_before is None:
        return 0.0
    ahead = (not_before - timezone.now()).total_seconds() + settings.LISTENER_CLOCK_SKEW
    return min(max(ahead, 0.0), MAX_HOLD)


class RetryLater(Exception):
    """The reconcile should run, but not now: try again after ``retry_after`` seconds (requests
    meanwhile coalesce into that retry)."""

    def __init__(self, retry_after: float, why: str, *, marked: bool = True) -> None:
        super().__init__(f"{why}, retry in {retry_after:.2f}s")
        self.retry_after = retry_after
        self.marked = marked


class LeaseBusy(RetryLater):
    """Another worker reconciles this Kyma right now. ``marked=False``: the retry holds no
    mark (an urgent task whose mark another queued task holds)."""

    def __init__(self, retry_after: float, *, marked: bool = True) -> None:
        super().__init__(retry_after, "lease busy", marked=marked)


class TooSoon(RetryLater):
    """The Kyma was reconciled less than ``RECONCILE_MIN_SPACING`` ago."""

    def __init__(self, retry_after: float) -> None:
        super().__init__(retry_after, "reconciled moments ago")


class NoBusySlot(RetryLater):
    """A busy runtime's task found none of this process's ``RECONCILE_BUSY_SLOTS`` free."""

    def __init__(self, retry_after: float, *, marked: bool = True) -> None:
        super().__init__(retry_after, "busy runtime, no slot free", marked=marked)


class WorkerStopping(Exception):
    """The worker received SIGTERM: a running reconcile stops at its next step and hands its Kyma
    back (lease released, a task queued again) instead of holding the shutdown
    (:func:`fleet.queue.lease.hand_back_all`)."""
