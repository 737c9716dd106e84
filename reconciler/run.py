"""Running a Kyma reconcile: the queue mark, the lease, the engine, and the record of it."""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import os
import threading
import time

from django.conf import settings
from django.db import DatabaseError, IntegrityError, connection, transaction
from django.utils import timezone

from fleet import queue
from fleet.models import Kyma, ReconcileRecord
from kernel.errors import QueueUnavailable
from reconciler.context import LeaseLost
from reconciler.drift import count_corrections
from reconciler.engine import Scope, kyma_reconcile
from reconciler.shared import SharedReads
from reconciler.stored import Seen, wait_until_stored

log = logging.getLogger(__name__)


class BusySlots:
    """How many of this process's reconciles may be of *busy* runtimes at once (their events
    keep coming: :mod:`fleet.queue.requests`), ``RECONCILE_BUSY_SLOTS``. The
    rest of the slots stay free for the fleet's other runtimes: under a storm of edits, a quiet
    runtime's reconcile neither waits behind the busy ones nor shares the CPU with all of them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held = 0

    def take(self) -> bool:
        with self._lock:
            if self._held >= settings.RECONCILE_BUSY_SLOTS:
                return False
            self._held += 1
            return True

    def give_back(self) -> None:
        with self._lock:
            self._held -= 1


BUSY_SLOTS = BusySlots()
# How long a busy runtime's task waits for a slot: its spacing (at least this), doubled on each
# try that found none (events coalesce meanwhile), up to BUSY_RETRY_MAX: tries cost CPU too.
BUSY_RETRY = 0.5
BUSY_RETRY_MAX = 4.0


def busy_wait(min_spacing: float, tries: int) -> float:
    """Seconds until a busy task's next try for a slot, after ``tries`` that found none."""
    return min(BUSY_RETRY_MAX, max(min_spacing, BUSY_RETRY) * 2 ** max(0, tries - 1))


def _defer_busy(kyma_id: int, start: queue.Started, *, marked: bool, wait: float) -> None:
    """A busy runtime's task finds no slot: it runs later (raises), and events meanwhile
    coalesce into it; or returns when another task of the Kyma is queued (it does the work)."""
    if marked:
        retry = queue.rearm(kyma_id, wait, not_before=start.not_before, changes=start.changes)
        if retry is not None:
            raise queue.NoBusySlot(retry)
    elif queue.rearm_urgent(kyma_id):
        raise queue.NoBusySlot(wait, marked=False)


def _after_quiet(kyma_id: int, min_spacing: float) -> bool:
    """Whether the last reconcile came after a quiet period (none in the two spacings before the
    one before it): then one more runs at once. The spacing is a budget, not a delay: a runtime
    gets two reconciles per two spacings, so a first change after a periodic reconcile (or after
    an earlier change long ago) is not held back, while a runtime that keeps changing still gets
    one reconcile per spacing."""
    before = list(
        ReconcileRecord.objects.filter(kyma_id=kyma_id)
        .order_by("-started_at")
        .values_list("started_at", flat=True)[1:2]
    )
    return not before or (timezone.now() - before[0]).total_seconds() >= 2 * min_spacing


def _spaced_wait(kyma_id: int, min_spacing: float, wait: float) -> float:
    """How long a runtime's request waits: the rest of the spacing, unless the last reconcile
    came after a quiet period."""
    return 0.0 if _after_quiet(kyma_id, min_spacing) else wait


def _urgent_wait(kyma_id: int, min_spacing: float) -> float:
    """How long a control-plane request waits: it may be the second reconcile within a spacing
    (the one that follows a runtime's change, e.g. a module manager's answer to it), not the
    third. So a change made in the control plane is not held back by the reconcile before it,
    while runtime events whose reconciles make the control plane write (a manager answering
    each) still give at most two reconciles per spacing."""
    before = list(
        ReconcileRecord.objects.filter(kyma_id=kyma_id)
        .order_by("-started_at")
        .values_list("started_at", flat=True)[1:2]
    )
    return min_spacing - (timezone.now() - before[0]).total_seconds() if before else 0.0


# The hint ends a moment after the spacing the task checks (that counts from the reconcile's own
# clock reading, taken a little after this one): a task due at the hint then never finds it too soon.
_SPACING_SLACK = 0.05


def _provisional_until(min_spacing: float) -> dt.datetime | None:
    """As the task starts (its mark goes), the queue learns that the next reconcile waits for the
    spacing, unless it knows a time already: a runtime that keeps changing sends its next event
    at once, and its task must not be due before this one decided (:func:`_space_next`). Until
    when (``None``: no spacing)."""
    if min_spacing <= 0:
        return None
    return timezone.now() + dt.timedelta(seconds=min_spacing + _SPACING_SLACK)


def _space_provisionally(kyma_id: int, min_spacing: float) -> bool:
    """:func:`_provisional_until` for a task whose mark went already. Whether it was set."""
    until = _provisional_until(min_spacing)
    return until is not None and queue.spaced(kyma_id, until, if_free=True)


def _space_next(kyma: Kyma, min_spacing: float, provisional: bool) -> None:
    """This reconcile runs: unless it came after a quiet period (then the next one may run at
    once, see :func:`_after_quiet`), tell the queue the next one waits for the spacing."""
    now = timezone.now()
    last = kyma.last_reconcile_at
    if last is not None and (now - last).total_seconds() < 2 * min_spacing:
        queue.spaced(kyma.pk, now + dt.timedelta(seconds=min_spacing + _SPACING_SLACK))
    elif provisional:
        queue.spaced(kyma.pk, None)


def _hand_back(
    kyma_id: int, kyma: Kyma | None, start: queue.Started, *, urgent: bool, marked: bool, why: str
) -> None:
    """The worker stops mid-reconcile: queue the Kyma again (raises RetryLater: the task is
    published anew, this one acknowledged), unless another task of it is queued already; the
    caller releases the lease. The reconcile is level-based: the next one finishes the work."""
    name = f"{kyma.namespace}/{kyma.name}" if kyma is not None else f"Kyma {kyma_id}"
    log.info("%s: %s; queued again", name, why)
    retry = queue.rearm(kyma_id, 0.0, not_before=start.not_before, changes=start.changes) if marked else None
    if retry is not None:
        raise queue.RetryLater(retry, "handed back: the worker stops")
    if urgent and queue.rearm_urgent(kyma_id):
        raise queue.RetryLater(0.0, "handed back: the worker stops", marked=False)


def _scope(start: queue.Started, reason: str) -> Scope:
    if start.full:
        return Scope.FULL
    return Scope.PERIODIC if reason == queue.PERIODIC_REASON else Scope.TARGETED


class _Records(list):
    """A batch's records still to insert: the batch appends, :class:`BatchWatch` may take them."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()

    def append(self, record: ReconcileRecord) -> None:
        with self._lock:
            super().append(record)

    def take(self) -> list[ReconcileRecord]:
        with self._lock:
            taken = list(self)
            self.clear()
            return taken

    def give_back(self, records: list[ReconcileRecord]) -> None:
        with self._lock:
            self[:0] = records


class _Batch:
    """A batch's progress, as :class:`BatchWatch` sees it: which Kyma runs since when, whether
    the Kymas after it were handed to another task, and the records of those it ran."""

    def __init__(self, kyma_ids: list[int], reason: str, marked_at: str) -> None:
        self.kyma_ids, self.reason, self.marked_at = kyma_ids, reason, marked_at
        self.lock = threading.Lock()
        self.index = -1
        self.since: float | None = None  # when the current Kyma started (None: between two)
        self.handed_over = False
        self.records = _Records()

    def begin(self, index: int) -> bool:
        """The batch starts its Kyma ``index``; False when the rest was handed over."""
        with self.lock:
            if self.handed_over:
                return False
            self.index, self.since = index, time.monotonic()
            return True

    def end(self) -> None:
        with self.lock:
            self.since = None

    def hand_over_if_slow(self, now: float, after: float) -> None:
        """When the current Kyma has run ``after`` seconds, the Kymas after it go to a new batch
        task at once (under the lock: the batch starts none of them meanwhile)."""
        with self.lock:
            if self.handed_over or self.since is None or now - self.since < after:
                return
            rest = self.kyma_ids[self.index + 1 :]
            if not rest:
                return
            try:
                queue.batch_hand_over(rest, self.reason, self.marked_at)
            except QueueUnavailable as exc:  # the batch runs them itself, later
                log.warning("could not hand %d Kyma(s) of a slow batch to another task: %s", len(rest), exc)
                self.since = None  # one try per Kyma
                return
            self.handed_over = True
        log.info(
            "Kyma %s of a batch has run %.1f s: its %d Kyma(s) still to come go to another task",
            self.kyma_ids[self.index],
            after,
            len(rest),
        )
        self.insert_records()

    def insert_records(self) -> None:
        """The records of the Kymas the batch ran before the slow one, now, not when it ends
        (from the watch's thread, on a connection it then closes: handing over is rare)."""
        pending = self.records.take()
        if not pending:
            return
        try:
            _records_insert(pending)
        except Exception as exc:  # the batch inserts them as it ends
            self.records.give_back(pending)
            if not isinstance(exc, DatabaseError):
                log.warning(
                    "records of a batch not inserted early (%s); the batch inserts them as it ends", exc
                )
        finally:
            connection.close()  # this thread writes only now and then


class BatchWatch:
    """The process's running batches, looked at a few times a second by one thread: a Kyma that
    runs longer than ``RECONCILE_BATCH_HANDOFF_AFTER`` (a slow or unreachable runtime) makes its
    batch hand the Kymas still to come to a new task, so they wait that long, not for its whole
    reconcile (up to its runtime's timeouts, for each call)."""

    EVERY = 0.25

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._batches: set[_Batch] = set()
        self._pid = 0

    def add(self, batch: _Batch) -> None:
        with self._lock:
            self._batches.add(batch)
            if self._pid != os.getpid():  # first batch of this process (or of a forked child)
                self._pid = os.getpid()
                threading.Thread(target=self._run, name="batch-watch", daemon=True).start()

    def remove(self, batch: _Batch) -> None:
        with self._lock:
            self._batches.discard(batch)

    def _run(self) -> None:
        while True:
            time.sleep(self.EVERY)
            with self._lock:
                batches = list(self._batches)
            after = settings.RECONCILE_BATCH_HANDOFF_AFTER
            for batch in batches:
                try:
                    batch.hand_over_if_slow(time.monotonic(), after)
                except Exception:  # the watch must outlive any one batch's trouble
                    log.exception("watching a batch of reconciles failed")


BATCH_WATCH = BatchWatch()


def kyma_reconcile_batch_run(
    kyma_ids: list[int], *, min_spacing: float = 0.0, reason: str = "", marked_at: str = ""
) -> tuple[list[tuple[int, queue.RetryLater]], list[int]]:
    """The periodic reconciles of a batch of Kymas (beat's sweep), one after the other, with the
    reads they share made once (:mod:`.shared`) and their records inserted at once at the end.
    Each Kyma's reconcile is the one of :func:`kyma_reconcile_run`: its mark cleared as it starts,
    its own lease, its own status write. Returns (the Kymas to retry later, with when; the Kymas
    not started because the worker stops): the task publishes a task of their own for each.
    ``marked_at``: when beat's sweep marked them; a batch that runs long (first reconciles, slow
    runtimes) moves the marks of its Kymas still to come along, every half
    ``RECONCILE_OVERDUE_AFTER``, so that the sweep does not queue copies of them. A Kyma that
    runs longer than ``RECONCILE_BATCH_HANDOFF_AFTER`` hands those to a new task
    (:class:`BatchWatch`): one slow runtime does not hold up the rest of its batch."""
    shared = SharedReads(kyma_ids, timezone.now())
    refreshed = time.monotonic()
    retries: list[tuple[int, queue.RetryLater]] = []
    batch = _Batch(kyma_ids, reason, marked_at)
    records = batch.records
    BATCH_WATCH.add(batch)
    try:
        for index, kyma_id in enumerate(kyma_ids):
            if batch.handed_over:
                break  # the rest went to another task (begin() checks again, under the lock)
            if queue.handing_back():
                return retries, kyma_ids[index:]
            if batch.marked_at and time.monotonic() - refreshed > settings.RECONCILE_OVERDUE_AFTER / 2:
                batch.marked_at = queue.marks_refresh(kyma_ids[index:], batch.marked_at)
                refreshed = time.monotonic()
            if not batch.begin(index):
                break
            try:
                kyma_reconcile_run(
                    kyma_id, min_spacing=min_spacing, reason=reason, shared=shared, records=records
                )
            except queue.RetryLater as later:
                retries.append((kyma_id, later))
            finally:
                batch.end()
    finally:
        BATCH_WATCH.remove(batch)
        _records_insert(records.take())
    return retries, []


def _records_insert(records: list[ReconcileRecord]) -> None:
    """Insert a batch's records in one statement (one at a time if a Kyma went meanwhile)."""
    if not records:
        return
    try:
        ReconcileRecord.objects.bulk_create(records)
    except IntegrityError:
        for record in records:
            with contextlib.suppress(IntegrityError), transaction.atomic():
                record.pk = None
                record.save()


def kyma_reconcile_run(
    kyma_id: int,
    *,
    min_spacing: float = 0.0,
    reason: str = "",
    urgent: bool = False,
    marked: bool = True,
    busy: int = 0,
    shared: SharedReads | None = None,
    records: list[ReconcileRecord] | None = None,
) -> None:
    """Entry point of the reconcile task; returns quietly when the Kyma is gone.

    Each reconcile that ran logs one INFO line: the Kyma, its outcome state, the duration, why it
    was requested (``reason``: of the request that queued the task; later ones coalesced into it)
    and the outcome's message.

    With ``min_spacing``, a Kyma whose last reconcile started less than that many seconds ago is
    deferred (:class:`TooSoon`), unless that reconcile came after a quiet period: a runtime that
    keeps changing gets at most one reconcile per spacing (two in a row after a quiet period), and
    cannot crowd the rest of the fleet out of the workers. An ``urgent`` reconcile (requested by
    the control plane: a user's edit, a manager's SyncResource) may be the second within a
    spacing (:func:`_urgent_wait`); one that is not ``marked`` leaves the queue mark to the task
    that holds it (:mod:`fleet.queue.requests`).
    A ``busy`` task (its runtime keeps changing: :mod:`fleet.queue.requests`; the number is its
    try for a slot) runs only when one of this process's ``RECONCILE_BUSY_SLOTS`` is free, else
    it retries later (:class:`NoBusySlot`, :func:`busy_wait`) holding its mark: nothing is read or
    lost meanwhile.
    When a request asked the reconcile not to read the runtime before some time (an event that
    arrived just before this task was due), it waits until then: at most the listener's margin.
    When the events said which changes they saw, it first checks that the runtime stored them
    (:mod:`.stored`).

    How much it reads (:class:`reconciler.Scope`): everything when a request it covers
    asked for that or did not say what changed (its mark says so: :mod:`fleet.queue.marks`), or
    when it found no mark (redelivered, or retried after it lost the mark: what it covers is
    unknown); else as beat's sweep when that queued it (``reason``); else only what its requests
    named. An unmarked task (a control-plane change: a module manager's SyncResource) is targeted:
    a request that wanted more also marked the queued task, which follows.

    Database round trips of a no-op: the lease is taken (one upsert of the Kyma's
    ``ReconcileState`` row) and the Kyma read under it, with the rows beside it, in one statement
    on PostgreSQL (:func:`fleet.queue.lease_acquire_read`; two on SQLite);
    the schedule write releases the lease in the same UPDATE, and the status (the Kyma row) and
    ``RuntimeSync`` are written only when they moved; the record is inserted without looking
    whether the Kyma still exists (the cleanup says when it deleted the row), by the batch for
    all its Kymas at once (``records``). ``shared``: the batch's reads (:mod:`.shared`).
    """
    queue.lease_release_unreleased()  # a reconcile that met a database outage held one
    provisional: bool | None = None  # not known yet: _run_started sets it
    if marked and not busy:  # the mark goes and the spacing holds in one round trip
        start = queue.start(kyma_id, space_until=_provisional_until(min_spacing))
        provisional = start.spaced
    elif marked:  # a busy task may find no slot and run later: no spacing before it runs
        start = queue.start(kyma_id)
    else:
        queue.start_urgent(kyma_id)
        start = queue.Started(found=True)
    if busy and not BUSY_SLOTS.take():
        _defer_busy(kyma_id, start, marked=marked, wait=busy_wait(min_spacing, busy))
        return  # another task is queued: it runs when a slot is free
    try:
        _run_started(kyma_id, start, min_spacing, reason, urgent, marked, shared, records, provisional)
    finally:
        if busy:
            BUSY_SLOTS.give_back()


def _run_started(
    kyma_id: int,
    start: queue.Started,
    min_spacing: float,
    reason: str,
    urgent: bool,
    marked: bool,
    shared: SharedReads | None = None,
    records: list[ReconcileRecord] | None = None,
    provisional: bool | None = None,
) -> None:
    not_before, changes = start.not_before, start.changes
    if provisional is None:
        provisional = _space_provisionally(kyma_id, min_spacing)
    hold = queue.hold_for(not_before)
    owner = queue.worker_id()
    read = queue.lease_acquire_read(kyma_id, owner=owner)  # the Kyma, read under its lease
    if read is None:
        if provisional:  # the holder decides (it set its own time, or had none to set)
            queue.spaced(kyma_id, None)
        if not Kyma.objects.filter(pk=kyma_id).exists():
            return
        wait = max(0.5, hold)
        retry = queue.rearm(kyma_id, wait, not_before=not_before, changes=changes) if marked else None
        if retry is not None:
            raise queue.LeaseBusy(retry_after=retry)
        if urgent and queue.rearm_urgent(kyma_id):  # it retries even so: the queued one may be spaced
            raise queue.LeaseBusy(retry_after=wait, marked=False)
        return  # another task is queued: it runs after the current holder
    outcome, kyma, released = None, None, False
    try:
        kyma = read
        if min_spacing > 0 and kyma.last_reconcile_at is not None:
            wait = min_spacing - (timezone.now() - kyma.last_reconcile_at).total_seconds()
            if wait > 0.005:
                wait = (
                    _urgent_wait(kyma_id, min_spacing) if urgent else _spaced_wait(kyma_id, min_spacing, wait)
                )
            if wait > 0.005:
                wait = max(wait, hold)
                if provisional:  # the reconcile before this one spaces the next: no later
                    queue.spaced(kyma_id, None)
                retry = queue.rearm(kyma_id, wait, not_before=not_before, changes=changes)
                if retry is not None:
                    log.info("%s/%s deferred: reconciled moments ago", kyma.namespace, kyma.name)
                    raise queue.TooSoon(retry_after=retry)
                return  # another task is queued: it runs after the spacing
        if min_spacing > 0:
            _space_next(kyma, min_spacing, provisional)
        if hold > 0:
            time.sleep(queue.hold_for(not_before))
        started_at, started = timezone.now(), time.perf_counter()
        seen: Seen = {}  # the changed objects, read once stored: the reconcile uses them
        stored = queue.decode_all(changes)
        if stored:  # the reconcile starts once they are stored
            wait_until_stored(kyma, stored, seen=seen)
            started_at, started = timezone.now(), time.perf_counter()
        outcome = kyma_reconcile(
            kyma,
            heartbeat=queue.LeaseKeeper(kyma_id, owner),
            lease_owner=owner,
            scope=_scope(start, reason),
            named=[change.key for change in stored],
            seen=seen,
            shared=shared,
        )
        released = outcome.lease_released
    except LeaseLost as exc:
        log.warning("%s; the new holder finishes the work", exc)
        return
    except queue.WorkerStopping as exc:
        _hand_back(kyma_id, kyma, start, urgent=urgent, marked=marked, why=str(exc))
        return
    finally:
        if not released:
            queue.lease_release(kyma_id, owner=owner)
    duration_ms = round((time.perf_counter() - started) * 1000)
    log.info(
        "reconciled %s/%s: %s in %d ms (requested: %s; %d runtime write(s)%s)%s",
        kyma.namespace,
        kyma.name,
        outcome.state,
        duration_ms,
        reason or "unknown",
        outcome.runtime_writes,
        "".join(f"; drift corrected: {d['kind']} {d['namespace']}/{d['name']}" for d in outcome.drift),
        f": {outcome.message}" if outcome.message else "",
    )
    if outcome.kyma_deleted:
        return
    record = ReconcileRecord(
        kyma_id=kyma_id,
        started_at=started_at,
        duration_ms=duration_ms,
        state=outcome.state,
        runtime_writes=outcome.runtime_writes,
        message=outcome.message[:2000],
        reason=reason[:100],
        changes=list(outcome.changes),
        drift_corrected=list(outcome.drift),
    )
    if records is not None and not outcome.drift:
        records.append(record)  # a batch inserts its records at once
        return
    # With corrections, one transaction: whoever sees the record also sees them counted. (A
    # no-op has none: its record is one INSERT, no BEGIN/COMMIT round trips.)
    try:
        with transaction.atomic() if outcome.drift else contextlib.nullcontext():
            record.save(force_insert=True)
            count_corrections([entry["kind"] for entry in outcome.drift])
    except IntegrityError:
        return  # the row was deleted meanwhile (by force): nothing to record it on
