"""Queueing of Kyma reconciles: coalesced, durable, and never two at once for one Kyma.

*Coalescing.* A mark per Kyma (:mod:`.marks`: a Redis key, or a row beside the Kyma) says "a
reconcile task is in the broker and has not started". A request claims the mark and publishes a
task only if it won the claim; a worker clears the mark when the task starts, *before* it reads
any state. So an event that arrives while a task waits is covered by that task, and an event that
arrives after a task started makes a new one: many events give one more reconcile after the last
of them, never zero. A mark older than ``RECONCILE_QUEUED_TTL`` counts as lost and is claimed
again. A request may also say the reconcile must not read the runtime before a given time (an
event that arrives just before the queued task is due: the API server stores that change after
the webhook answered); the starting task then waits until that time.

*Control-plane requests* (``urgent``: a user's edit, a SyncResource or ModuleConfig written by a
module manager) are not held back by the reconcile before them (``RECONCILE_MIN_SPACING`` bounds
runtimes that keep changing, not the control plane; such a reconcile may be the second within a
spacing, not the third, see :mod:`reconciler.run`). They coalesce into a queued task only
when they claim the mark; when a task is queued already (maybe deferred by the spacing), they
publish one more *unmarked* task that leaves the mark to the queued one. A second mark per Kyma
(:meth:`.marks.ReconcileFlags.claim_urgent`) coalesces those unmarked tasks the same way: at most
one waits beside the marked one. So a runtime-event storm, even one a manager answers write by
write, gets at most two reconciles per spacing.

*Durability.* The claim is undone and :class:`QueueUnavailable` raised when the broker refuses the
message, so a caller (the listener) can answer 503 and the sender retries. A mark can still
outlive its task: the process that claimed it died before it published (a listener killed
mid-request), or a worker that held the task was killed (Redis gives its messages back only after
the visibility timeout). Events meanwhile coalesce into the mark and are answered 200, so beat's
sweep looks for such marks (:func:`reconcile_overdue_requeue`): a mark whose task was due
``RECONCILE_OVERDUE_AFTER`` ago, while the broker's queue holds fewer than
:data:`OVERDUE_BACKLOG` messages (a long backlog delays tasks without losing them: no copies
then), is claimed again for now and its task published anew; whichever of the two tasks starts
first does the work, and a mark gets at most one copy per ``RECONCILE_OVERDUE_AFTER``.

*Spacing.* A reconcile that starts records until when the next one of its Kyma is spaced
(``RECONCILE_MIN_SPACING``; :func:`reconcile_spaced`, in the mark store): a runtime event
meanwhile claims the mark for a task due then and publishes it with that countdown at once. So a
runtime that keeps changing costs one task per spacing, not tasks that start, find it too soon
and retry (taking worker time from other Kymas); the task still checks the spacing itself.

*Busy runtimes.* An event whose claim the spacing held back, or that finds a task of its Kyma
queued already, marks the Kyma *busy* for a while (``marks.BUSY_FOR``; with Redis marks): its
runtime keeps changing. Tasks of busy Kymas (the event's, and the
control plane's answers to it, e.g. a module manager's SyncResource) carry ``busy`` and share
a few slots of each worker process (``RECONCILE_BUSY_SLOTS``, :mod:`reconciler.run`); when
none is free they wait, holding their mark, so events meanwhile coalesce into them. So a storm of
edits in many runtimes neither queues nor slows down a quiet runtime's reconcile.

*Batches.* Beat's periodic reconciles (``reason="periodic"``) go out ``RECONCILE_BATCH_SIZE`` Kymas
to a task (``controlplane.kyma_reconcile_batch``): each Kyma is marked as for a task of its own,
and the batch clears each mark as it starts that Kyma (``reconciler.run``).

*Mutual exclusion* is :mod:`.lease`; what a task does when it cannot run now, :mod:`.retry`;
when the next periodic reconcile is due, :mod:`.schedule`.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
from collections.abc import Collection, Sequence

from celery import current_app
from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.utils import timezone
from kombu.exceptions import ChannelError
from kombu.exceptions import OperationalError as KombuOperationalError
from redis.exceptions import RedisError

from kernel.errors import QueueUnavailable

from . import schedule
from .changes import StoredChange
from .marks import FULL, Started, flags
from .marks.base import to_stamp

log = logging.getLogger(__name__)

RECONCILE_TASK = "controlplane.kyma_reconcile"
# Beat's sweep: the periodic reconciles of due Kymas, RECONCILE_BATCH_SIZE to a task.
RECONCILE_BATCH_TASK = "controlplane.kyma_reconcile_batch"
# The reason of beat's sweep. A reconcile queued only for it may trust the runtime watcher's events
# for what they cover (see ``reconciler.engine``); any other reason reads everything.
PERIODIC_REASON = "periodic"
# A claim whose task is due this much later than asked was held back by the spacing: the runtime
# keeps changing (its task is *busy*, see reconciler.run).
BUSY_MARGIN = 0.01
# With this many messages waiting or more, the workers are behind: an overdue mark's task is most
# likely among them, and copies of thousands of tasks would only lengthen the backlog. (Beat's own
# tasks and the reconciles of a busy fleet keep a few messages in the queue at most times.)
OVERDUE_BACKLOG = 50


def _publish(
    kyma_ids: Sequence[int],
    countdown: float,
    reason: str,
    *,
    urgent: bool = False,
    marked: bool = True,
    busy: Collection[int] = (),
) -> None:
    """Publish the reconcile tasks by their stable name (the task module sits above this one);
    the reason travels with the task, for its log line. ``urgent``: not held back by the spacing;
    ``marked=False``: the task holds no mark (another queued task does) and must not clear it;
    ``busy``: Kymas whose runtime keeps changing (their tasks share a few slots of each worker)."""
    options = {"countdown": countdown} if countdown > 0 else {}
    kwargs: dict = {"reason": reason}
    if urgent:
        kwargs.update(urgent=True, marked=marked)
    with current_app.producer_or_acquire() as producer:
        for kyma_id in kyma_ids:
            current_app.send_task(
                RECONCILE_TASK,
                args=[kyma_id],
                kwargs={**kwargs, "busy": 1} if kyma_id in busy else kwargs,
                producer=producer,
                retry=True,
                **options,
            )


def _publish_batches(kyma_ids: Sequence[int], countdown: float, reason: str, marked_at: str) -> None:
    """Beat's periodic reconciles, ``RECONCILE_BATCH_SIZE`` Kymas to a task (each Kyma marked as
    for a task of its own: the batch clears each mark as it starts that Kyma, and keeps the marks
    of those still to come from counting as lost: ``marked_at``, :func:`reconcile_marks_refresh`)."""
    size = settings.RECONCILE_BATCH_SIZE
    options = {"countdown": countdown} if countdown > 0 else {}
    with current_app.producer_or_acquire() as producer:
        for start in range(0, len(kyma_ids), size):
            current_app.send_task(
                RECONCILE_BATCH_TASK,
                args=[list(kyma_ids[start : start + size])],
                kwargs={"reason": reason, "marked_at": marked_at},
                producer=producer,
                retry=True,
                **options,
            )


def _publish_failed(kyma_ids: list[int], eta: dt.datetime) -> None:
    """Undo the claims of a publish that failed. Requests that coalesced into them meanwhile were
    already answered, so the Kymas are also marked due: the periodic sweep queues them as soon as
    the broker is back."""
    with contextlib.suppress(RedisError):
        flags().release(kyma_ids, eta)
    with contextlib.suppress(DatabaseError):
        schedule.due_now(kyma_ids, timezone.now())


def kyma_reconcile_request(
    kyma_ids: Sequence[int], *, reason: str, countdown: float = 0, urgent: bool = False, full: bool = True
) -> list[int]:
    """Ask for a reconcile of each Kyma; returns the ids for which a task was published.

    Kymas with a reconcile already queued are covered by it and publish nothing, unless the
    request is ``urgent`` (made by the control plane: see the module docstring).
    ``full``: the reconcile reads everything in the runtime, also what no event said changed (a
    queued task it joins does too). ``full=False`` is for requests whose change the control plane
    holds (a module manager's SyncResource, beat's sweep): see :mod:`reconciler.engine`.
    ``countdown`` delays the task (requests meanwhile coalesce into it). Inside a transaction the
    request waits for the commit (a worker must see what was written); a publish error then
    surfaces in the log, not to the caller.
    """
    ids = list(dict.fromkeys(kyma_ids))
    if connection.in_atomic_block:
        transaction.on_commit(lambda: _request_logged(ids, reason, countdown, urgent, full))
        return []
    return _request(ids, reason, countdown, urgent, full)


def _request_logged(kyma_ids: list[int], reason: str, countdown: float, urgent: bool, full: bool) -> None:
    try:
        _request(kyma_ids, reason, countdown, urgent, full)
    except QueueUnavailable as exc:
        # The periodic sweep (or the expiry of the mark) picks these Kymas up again.
        log.warning("reconcile request for %d Kyma(s) not queued (%s): %s", len(kyma_ids), reason, exc)


def _request(
    kyma_ids: list[int], reason: str, countdown: float, urgent: bool = False, full: bool = True
) -> list[int]:
    now = timezone.now()
    eta = now + dt.timedelta(seconds=countdown)
    store = flags()
    try:
        claimed = store.claim(kyma_ids, now, eta, full=full)
    except RedisError as exc:
        raise QueueUnavailable(f"the reconcile queue marks are unavailable: {exc}") from exc
    won = set(claimed)
    try:  # a queued urgent task beside the queued one covers this request too
        extra = store.claim_urgent([i for i in kyma_ids if i not in won], now) if urgent else []
    except RedisError as exc:
        _publish_failed(claimed, eta)  # no task went out for the claims either
        raise QueueUnavailable(f"the reconcile queue marks are unavailable: {exc}") from exc
    if not claimed and not extra:
        return []
    busy: set[int] = set()
    if urgent:  # a control-plane request for a runtime that keeps changing is busy too
        with contextlib.suppress(RedisError):  # a hint: the claims stand, the tasks go out
            busy = store.busy([*claimed, *extra])
    try:
        # The unmarked ones first: if they fail, no claimed task went out yet to undo.
        _publish(extra, countdown, reason, urgent=True, marked=False, busy=busy)
        if reason == PERIODIC_REASON and not urgent and settings.RECONCILE_BATCH_SIZE > 1:
            _publish_batches(claimed, countdown, reason, to_stamp(eta))
        else:
            _publish(claimed, countdown, reason, urgent=urgent, busy=busy)
    except (KombuOperationalError, OSError) as exc:
        _publish_failed(claimed, eta)
        raise QueueUnavailable(f"the task queue is unavailable: {exc}") from exc
    log.debug("queued reconcile of %s (%s)", claimed + extra, reason)
    return [kyma_id for kyma_id in kyma_ids if kyma_id in won or kyma_id in set(extra)]


def broker_queue_length() -> int:
    """Messages waiting in the reconcile queue (not those workers hold)."""
    name = current_app.conf.task_default_queue
    with current_app.connection_for_read() as conn:
        try:
            return conn.default_channel.queue_declare(queue=name, passive=True).message_count
        except ChannelError:  # never declared: nothing was ever queued there
            return 0


def reconcile_overdue_requeue(*, after: float, limit: int) -> list[int]:
    """Publish a task again for every mark whose task was due over ``after`` seconds ago and
    did not start, unless the workers are far behind (:data:`OVERDUE_BACKLOG`). Returns the
    Kymas queued again."""
    now = timezone.now()
    store = flags()
    overdue = store.overdue(now - dt.timedelta(seconds=after), limit)
    if not overdue or broker_queue_length() >= OVERDUE_BACKLOG:
        return []
    requeued = [kyma_id for kyma_id, eta in overdue if store.refresh(kyma_id, eta, now)]
    if requeued:
        try:
            _publish(requeued, 0.0, "requeued: its task was lost")
        except (KombuOperationalError, OSError) as exc:
            raise QueueUnavailable(f"the task queue is unavailable: {exc}") from exc
        log.warning(
            "queued again the reconcile of %d Kyma(s) whose task was due %g s ago and never started",
            len(requeued),
            after,
        )
    return requeued


def kyma_reconcile_request_one(
    kyma_id: int,
    *,
    countdown: float,
    margin: float = 0.0,
    reason: str = "watch-event",
    change: StoredChange | None = None,
) -> tuple[bool, dt.datetime]:
    """The hot path of one WatchEvent: one round trip when a task is already queued.

    Returns (queued a task, the earliest time the task reads the runtime). The reconcile that
    covers this request starts no earlier than its ETA, and never reads the runtime earlier than
    ``margin`` seconds from now: when the queued task is due sooner, the mark records that and the
    task waits (the time returned is then the later of the two). Callers may skip asking again
    for requests that arrive more than ``margin`` before the time returned.

    With ``change`` (the event said which change it saw) there is no margin: the reconcile
    checks that the runtime stored the change before it reads (:mod:`.changes`), so the task
    may start at once (give ``countdown=0``). Only when a queued task already carries too many
    changes does this one fall back to ``margin`` (then the listener's fixed delay).
    """
    now = timezone.now()
    eta = now + dt.timedelta(seconds=countdown)
    store = flags()
    if change is not None:
        need, changes = None, [change.encode()]
        fallback: dt.datetime | None = now + dt.timedelta(seconds=margin)
    else:  # what changed is unknown: the reconcile reads everything
        need, changes, fallback = now + dt.timedelta(seconds=margin), [FULL], None
    try:
        claimed, eta = store.claim_one(kyma_id, now, eta, need, changes, fallback)
    except RedisError as exc:
        raise QueueUnavailable(f"the reconcile queue marks are unavailable: {exc}") from exc
    if not claimed:
        return False, eta
    wait = (eta - now).total_seconds()
    try:  # the ETA may be later than asked: the Kyma is spaced (its reconcile started moments ago)
        _publish(
            [kyma_id], max(countdown, wait), reason, busy={kyma_id} if wait > countdown + BUSY_MARGIN else ()
        )
    except (KombuOperationalError, OSError) as exc:
        _publish_failed([kyma_id], eta)
        raise QueueUnavailable(f"the task queue is unavailable: {exc}") from exc
    return True, eta


def reconcile_batch_hand_over(kyma_ids: Sequence[int], reason: str, marked_at: str) -> None:
    """A batch hands the Kymas it has not started to a new batch task, at once (one of its Kymas
    runs long: a slow runtime). Their marks stay (``marked_at``, as the batch holds them): the new
    batch clears each as it starts it. Raises :class:`QueueUnavailable` when the broker refuses."""
    try:
        _publish_batches(kyma_ids, 0.0, reason, marked_at)
    except (KombuOperationalError, OSError) as exc:
        raise QueueUnavailable(f"the task queue is unavailable: {exc}") from exc


def reconcile_marks_refresh(kyma_ids: Sequence[int], marked_at: str) -> str:
    """A batch that has been running a while: the marks of its Kymas still to come (set for
    ``marked_at``, as :func:`to_stamp` wrote it) move to now, so beat's sweep does not take them
    for lost (``RECONCILE_OVERDUE_AFTER``) and queue copies; a mark that moved on meanwhile (a
    request's task started) is left as it is. Returns the marks' time now."""
    now = timezone.now()
    store = flags()
    with contextlib.suppress(RedisError, DatabaseError):  # a hint: a copy only costs a reconcile
        for kyma_id in kyma_ids:
            store.refresh(kyma_id, marked_at, now)
    return to_stamp(now)


def reconcile_started(kyma_id: int) -> dt.datetime | None:
    """A task for this Kyma starts: later requests must queue a new task. Returns the time before
    which it must not read the runtime, when a request asked for one."""
    return flags().started(kyma_id).not_before


def reconcile_start_urgent(kyma_id: int) -> None:
    """An unmarked urgent task starts (before it reads any state): later urgent requests queue
    a new one."""
    flags().started_urgent(kyma_id)


def reconcile_rearm_urgent(kyma_id: int) -> bool:
    """An unmarked urgent task cannot run now: False when another one is queued (it does the
    work), else it holds the second mark again and retries."""
    return bool(flags().claim_urgent([kyma_id], timezone.now()))


def reconcile_start(kyma_id: int, *, space_until: dt.datetime | None = None) -> Started:
    """:func:`reconcile_started`, with the changes the runtime must have stored before the task
    reads it (encoded; :func:`fleet.queue.changes.decode_all`). ``space_until``: also
    :func:`reconcile_spaced` until then ``if_free``, in the same round trip (a hint: not set when
    the marks are unavailable; ``Started.spaced`` says whether it was)."""
    return flags().started(kyma_id, space_until=space_until)


def reconcile_rearm(
    kyma_id: int,
    retry_after: float = 0.0,
    *,
    not_before: dt.datetime | None = None,
    changes: tuple[str, ...] = (),
) -> float | None:
    """A task cannot run now and retries in ``retry_after`` seconds: requests until then coalesce
    into it, and it keeps ``not_before`` and the ``changes`` to check. Returns the seconds after
    which it retries (later than asked while the Kyma is spaced: the mark says when the task
    starts, and it must not start earlier). ``None`` when another task for the Kyma is queued
    already: that one does the work (and learns ``not_before`` and the changes), so the caller
    must not retry (retrying anyway would leave two tasks cycling where one is enough)."""
    now = timezone.now()
    eta = now + dt.timedelta(seconds=retry_after)
    need = max(not_before or now, now)
    claimed, eta = flags().claim_one(kyma_id, now, eta, need, changes, need)
    return max(retry_after, (eta - now).total_seconds()) if claimed else None


def reconcile_spaced(kyma_id: int, until: dt.datetime | None, *, if_free: bool = False) -> bool:
    """Until when the next reconcile of this Kyma waits for the spacing (``None``: it need not):
    requests meanwhile publish their task with that countdown at once, instead of a task that
    starts, finds it too soon and retries (a hint; the task still checks). ``if_free``: only
    when no such time holds now (a provisional one, set as a task starts, in the same moment
    its mark goes). Returns whether it was set."""
    try:
        return flags().space(kyma_id, until, if_free=if_free)
    except (RedisError, DatabaseError):  # a hint: the task's own check still holds
        return False


def reconcile_queued(kyma_ids: Sequence[int]) -> set[int]:
    return flags().queued(kyma_ids)
