"""The listener's shortcut: skip the queue round trip for events a queued reconcile covers."""

from __future__ import annotations

import time

from django.conf import settings
from django.utils import timezone

from .changes import StoredChange
from .requests import kyma_reconcile_request_one as request_one


class Coverage:
    """Skips the round trip for events a queued reconcile provably covers.

    The reconcile that covers an event must read the runtime at least ``LISTENER_EVENT_MARGIN``
    after the event: a validating webhook is called before the API server stores the change. A
    task due at ``E`` (the ETA the queue reports; Celery holds a task until then) covers, without
    asking, every event that arrives before ``E`` minus the margin. ``LISTENER_CLOCK_SKEW`` is
    taken off for clocks of other hosts (workers, other listeners) that run ahead of ours. An
    event closer to ``E`` asks the queue, which makes the task wait for it.

    An event that finds the task due sooner than it may read (due within the margin, or overdue
    because the workers lag) asks it to read no earlier than ``LISTENER_RECONCILE_DELAY`` after
    the event, as a task the event queued itself would: the events of the next moments (that
    delay less the margin and the skew) are then covered without asking, instead of each one
    asking while the workers are behind (bench/listener.py row (a)).

    An event that says which change it saw (our runtime watcher) needs no delay and no margin:
    it always asks the queue, which adds the change to the queued task's mark (or queues a task
    due now), and the task checks that the runtime stored the change before it reads.
    """

    def __init__(self) -> None:
        self._until: dict[int, float] = {}

    def request(self, kyma_id: int, change: StoredChange | None = None) -> bool:
        """Ask for a reconcile; True when this event queued a task."""
        if change is not None:
            delay = settings.LISTENER_RECONCILE_DELAY
            return request_one(kyma_id, countdown=0, margin=delay, change=change)[0]
        if time.monotonic() < self._until.get(kyma_id, 0.0):
            return False
        margin, delay = settings.LISTENER_EVENT_MARGIN, settings.LISTENER_RECONCILE_DELAY
        # (LISTENER_EVENT_MARGIN=0 turns the wait off altogether)
        queued, start = request_one(kyma_id, countdown=delay, margin=delay if margin > 0 else 0)
        window = (start - timezone.now()).total_seconds() - margin - settings.LISTENER_CLOCK_SKEW
        if window > 0:
            if len(self._until) > 50_000:
                self._until.clear()
            self._until[kyma_id] = time.monotonic() + window
        return queued

    def clear(self) -> None:
        self._until.clear()
