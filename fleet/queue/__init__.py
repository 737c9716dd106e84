"""Reconcile queueing, in one place: every interface asks for reconciles through this API.

- :func:`request` (many Kymas) and :func:`request_one` (the listener's hot path) coalesce: a
  mark per Kyma (:mod:`.marks`, Redis or a column) says a task is queued and not started, so
  requests meanwhile publish nothing. A request may ask that the reconcile not read the runtime
  before a time (an event just before the task is due; see ``LISTENER_EVENT_MARGIN``).
- :mod:`.changes`: a change an event reported (:class:`StoredChange`); the mark carries the
  union of them and the starting task checks that the runtime stored them before it reads.
- :func:`started` clears the mark when a task starts and returns that "not before" time
  (:func:`start` returns the changes too);
  :func:`rearm` makes a task that cannot run now (:mod:`.retry`) the one later requests join.
- :mod:`.lease`: never two reconciles of one Kyma at once (renewed while it runs, short when not);
  :mod:`.schedule`: when the next periodic reconcile is due, written as the reconcile ends.
- :class:`Coverage`: the listener skips the round trip for events a queued task provably covers.

Tasks are published by their stable name (``controlplane.kyma_reconcile``): this package sits
below the task module, the listener, the services, the jobs and beat, which all call it.
"""

from .changes import StoredChange, decode_all
from .coverage import Coverage
from .lease import (
    LeaseKeeper,
    hand_back_all,
    handing_back,
    lease_abandoned_take,
    lease_acquire,
    lease_acquire_read,
    lease_extend,
    lease_release,
    lease_release_unreleased,
    lease_released,
    worker_id,
)
from .marks import Started, flags
from .requests import (
    PERIODIC_REASON,
    RECONCILE_BATCH_TASK,
    RECONCILE_TASK,
)
from .requests import (
    kyma_reconcile_request as request,
)
from .requests import (
    kyma_reconcile_request_one as request_one,
)
from .requests import (
    reconcile_batch_hand_over as batch_hand_over,
)
from .requests import (
    reconcile_marks_refresh as marks_refresh,
)
from .requests import (
    reconcile_overdue_requeue as requeue_overdue,
)
from .requests import (
    reconcile_queued as queued,
)
from .requests import (
    reconcile_rearm as rearm,
)
from .requests import (
    reconcile_rearm_urgent as rearm_urgent,
)
from .requests import (
    reconcile_spaced as spaced,
)
from .requests import (
    reconcile_start as start,
)
from .requests import (
    reconcile_start_urgent as start_urgent,
)
from .requests import (
    reconcile_started as started,
)
from .retry import MAX_HOLD, LeaseBusy, NoBusySlot, RetryLater, TooSoon, WorkerStopping, hold_for
from .schedule import due_now, reconcile_finished
from .schedule import next_at as next_due_at
from .warm import publisher_warm

__all__ = [
    "MAX_HOLD",
    "PERIODIC_REASON",
    "RECONCILE_BATCH_TASK",
    "RECONCILE_TASK",
    "Coverage",
    "LeaseBusy",
    "LeaseKeeper",
    "NoBusySlot",
    "RetryLater",
    "Started",
    "StoredChange",
    "TooSoon",
    "WorkerStopping",
    "batch_hand_over",
    "decode_all",
    "due_now",
    "flags",
    "hand_back_all",
    "handing_back",
    "hold_for",
    "lease_abandoned_take",
    "lease_acquire",
    "lease_acquire_read",
    "lease_extend",
    "lease_release",
    "lease_release_unreleased",
    "lease_released",
    "marks_refresh",
    "next_due_at",
    "publisher_warm",
    "queued",
    "rearm",
    "rearm_urgent",
    "reconcile_finished",
    "request",
    "request_one",
    "requeue_overdue",
    "spaced",
    "start",
    "start_urgent",
    "started",
    "worker_id",
]
