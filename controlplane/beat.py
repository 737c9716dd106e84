"""Beat, elected: several ``celery -A controlplane beat`` processes, one sends, the others stand by.

Guarantees (the periodic work of :data:`settings.CELERY_BEAT_SCHEDULE`: sweeps, renewals, checks):

- One process leads: it holds the ``beat`` lease (:mod:`controlplane.leases`, a database row)
  and renews it every quarter of ``BEAT_LEASE_SECONDS`` (from a thread of its own); the others
  try to take it every ``BEAT_STANDBY_POLL`` seconds. A leader that dies (SIGKILL, node lost)
  is replaced within ``BEAT_LEASE_SECONDS`` plus one poll; one that stops on purpose (SIGTERM, a
  rolling update) releases the lease and is replaced within one poll.
- No periodic task is sent twice for one tick: before sending, the leader *claims* the tick in
  the database, in a transaction fenced by its lease term (:func:`controlplane.leases.lease_fenced`):
  the entry's ``last_run_at`` moves from the value this process last saw to now, only if nobody
  moved it meanwhile. A leader that was paused past its lease (or cut off) finds its term gone
  and sends nothing; two claims of one entry are always at least its interval apart.
- None is skipped for longer than a takeover: a new leader reads every entry's ``last_run_at``
  as the previous leader left it and sends at once what is due. (A claim is committed just before
  its message is sent: a leader killed between the two loses that one tick, which the next one
  covers; a failed send, the broker being down, is logged and the next tick goes out as usual.)

Who leads and since when: one log line on every change (``beat: leading since ...``,
``beat: standing by; ... leads since ...``), the gauges of :mod:`controlplane.probes` on each
beat's side port (``BEAT_METRICS_BIND``), and the web role's ``controlplane_beat_leader_*``
gauges read from the lease row (:mod:`controlplane.metrics`).

Why a lease in the database rather than a lock elsewhere (docs/operators/high-availability.md, "Beat,
elected"): it works with the quickstart's SQLite as with PostgreSQL, needs no other service, survives a broker
outage (Redis down does not unseat the leader), ends within a bounded time however the leader
died (a PostgreSQL advisory lock held by a frozen or partitioned leader's open session is never
released), and its term fences the claim of each tick.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from celery import signals
from django.conf import settings
from django.db import DatabaseError, InterfaceError, close_old_connections, transaction
from django.db.models import F
from django_celery_beat.models import PeriodicTask
from django_celery_beat.schedulers import DatabaseScheduler, ModelEntry
from kombu.exceptions import OperationalError

from controlplane import leases, probes
from kernel.outage import Outage, describe

log = logging.getLogger("controlplane.beat")

LEASE_NAME = "beat"


def holder_id() -> str:
    """Who this beat is: ``host:pid`` (the pod's name on Kubernetes)."""
    return f"{socket.gethostname()}:{os.getpid()}"


def _iso(moment: dt.datetime | None) -> str:
    return moment.astimezone(dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z") if moment else "-"


# A scheduler loop that has not come round for this long is stuck: its lease keeper stops renewing
# (and gives the lease up), so a standby takes over instead of a leader that sends nothing.
LOOP_STALLED_AFTER = 30.0


class Election:
    """This process's side of the ``beat`` lease: take it when free, renew it while held, give
    it up when stopping. :meth:`step` does one round (renew, or try to take) and says when the
    next one is due; :meth:`leading` says whether this process may act (its lease still valid by
    its own clock).

    In a beat process the rounds run in a thread of their own (:meth:`keep`), so a slow send or
    a slow schedule read never delays a renewal: the lease can be short (a standby takes over a
    lost leader within ``BEAT_LEASE_SECONDS`` plus one ``BEAT_STANDBY_POLL``). Without that
    thread (a scheduler made in a test) the scheduler's tick runs the rounds that are due.

    The database away: a leader stops leading at its first failed renewal (it can no longer
    fence its claims, and does not pretend to), and every beat retries with a growing delay
    (``BEAT_STANDBY_POLL`` doubling up to ``BEAT_LEASE_SECONDS``), one log line per try
    (:class:`kernel.outage.Outage`). When it answers, a leader that lost it only for the outage
    takes its own lease back at once (a new term) instead of waiting for it to run out."""

    def __init__(self, *, holder: str, seconds: float, poll: float) -> None:
        self.holder = holder
        self.seconds = seconds
        self.poll = poll
        self.held: leases.Held | None = None
        self.renew_every = seconds / 4
        self._due = 0.0
        self._leader_seen: tuple[str, int] | None = None
        self.reached_database_at: float | None = None
        self.lock = threading.Lock()
        self.outage = Outage(
            log, "beat", first=poll, most=seconds, doing="not leading until it answers (a lease needs it)"
        )
        self.loop_alive: Callable[[], bool] = lambda: True
        self._keeper: threading.Thread | None = None
        self._stop = threading.Event()

    def leading(self) -> bool:
        held = self.held
        return held is not None and held.valid()

    def term(self) -> int | None:
        """The lease term this process leads with now (``None``: standing by)."""
        held = self.held
        return held.term if held is not None and held.valid() else None

    def step(self) -> bool:
        """One round, under :attr:`lock`: renew (leading) or try to take the lease (standing by).
        Returns True when this process just became leader."""
        try:
            if self.held is not None:
                self._renew()
                return False
            became = self._take()
        except (DatabaseError, InterfaceError) as exc:
            close_old_connections()
            self.database_failed(exc)
            return False
        self.outage.recovered()
        return became

    def step_if_due(self) -> bool:
        """:meth:`step` when a round is due (the tick's way, without a keeper thread)."""
        if time.monotonic() < self._due:
            return False
        with self.lock:
            return self.step()

    def _renew(self) -> None:
        held = self.held
        renewed = leases.lease_renew(held)
        self.reached_database_at = time.monotonic()
        self.outage.recovered()
        if renewed is None:
            self.lose("it ran out or another beat took it")
            return
        if self.held is not None and self.held.term == renewed.term:
            self.held = renewed
        self._due = time.monotonic() + self.renew_every

    def _take(self) -> bool:
        self._due = time.monotonic() + self.poll
        held = leases.lease_acquire(name=LEASE_NAME, holder=self.holder, seconds=self.seconds)
        self.reached_database_at = time.monotonic()
        self.outage.recovered()
        if held is None:
            self._standing_by()
            return False
        self.held = held
        self._due = time.monotonic() + self.renew_every
        self._leader_seen = (held.holder, held.term)
        log.info(
            "beat: leading since %s (lease term %d, holder %s); a standby takes over within %g s "
            "if this process dies",
            _iso(held.acquired_at),
            held.term,
            held.holder,
            self.seconds + self.poll,
        )
        return True

    def database_failed(self, exc: BaseException) -> None:
        """The database did not answer (a renewal, a claim, a schedule read): stop leading at once,
        log the outage (once, then a line per retry) and wait before the next round."""
        delay = self.outage.failed(exc)
        if self.held is not None:
            self.lose("it cannot be renewed while the database is unreachable")
        self._due = time.monotonic() + delay

    def lose(self, why: str) -> None:
        held, self.held = self.held, None
        self._due = time.monotonic() + self.poll
        log.warning("beat: lost the lease (term %d): %s; standing by", held.term if held else 0, why)

    def _standing_by(self) -> None:
        lease = leases.lease_current(LEASE_NAME)
        if lease is None or (lease.holder, lease.term) == self._leader_seen:
            return
        self._leader_seen = (lease.holder, lease.term)
        log.info(
            "beat: standing by; beat %s leads since %s (lease term %d)",
            lease.holder,
            _iso(lease.acquired_at),
            lease.term,
        )

    def release(self) -> None:
        held, self.held = self.held, None
        if held is None:
            return
        try:
            if leases.lease_release(held):
                log.info("beat: stopping; lease term %d released for a standby", held.term)
        except (DatabaseError, InterfaceError) as exc:
            log.warning("beat: could not release the lease (it runs out by itself): %s", describe(exc))

    def until_next_step(self) -> float:
        return max(0.0, self._due - time.monotonic())

    # --- the keeper thread ---------------------------------------------------------------------

    def keep(self) -> None:
        """Run the rounds in a thread of their own (idempotent)."""
        if self._keeper is not None and self._keeper.is_alive():
            return
        self._stop.clear()
        self._keeper = threading.Thread(target=self._keep, name="beat-lease", daemon=True)
        self._keeper.start()

    def _keep(self) -> None:
        stalled = False
        while not self._stop.wait(self.until_next_step()):
            if not self.loop_alive():
                if not stalled:
                    stalled = True
                    log.error(
                        "beat: the scheduler loop has not come round for %g s; giving the lease up",
                        LOOP_STALLED_AFTER,
                    )
                with self.lock:
                    self.release()
                    self._due = time.monotonic() + self.poll
                continue
            stalled = False
            try:
                with self.lock:
                    self.step()
            except Exception:  # a bug: said with its traceback, and the rounds go on
                log.exception("beat: the lease keeper failed; trying again in %g s", self.poll)
                self._due = time.monotonic() + self.poll
        close_old_connections()

    def stop(self) -> None:
        """Stop the keeper thread (before :meth:`release`)."""
        self._stop.set()
        keeper, self._keeper = self._keeper, None
        if keeper is not None and keeper is not threading.current_thread():
            keeper.join(timeout=5)


class ClaimedEntry(ModelEntry):
    """A schedule entry that knows the ``last_run_at`` its row had when it was read or claimed
    (``stored``; None when the row had none): its next claim moves exactly that value, so an
    entry that went stale (the row moved on since) can never claim a tick again."""

    stored: dt.datetime | None = None
    claimable: bool = False

    def __init__(self, model: PeriodicTask, app: Any = None) -> None:
        stored = model.last_run_at
        super().__init__(model, app=app)
        self.stored, self.claimable = stored, True

    def __next__(self) -> ClaimedEntry:
        entry = super().__next__()
        entry.claimable = False  # until its own claim succeeds (ElectedScheduler.reserve)
        return entry


class ElectedScheduler(DatabaseScheduler):
    """django-celery-beat's database scheduler, sending only while it leads, each tick claimed
    once in the database (module docstring)."""

    Entry = ClaimedEntry

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.election = Election(
            holder=holder_id(),
            seconds=settings.BEAT_LEASE_SECONDS,
            poll=settings.BEAT_STANDBY_POLL,
        )
        self.election.loop_alive = lambda: time.monotonic() - self.last_tick < LOOP_STALLED_AFTER
        self._claim_won = False
        self._claimed_run_at: dt.datetime | None = None
        self._unreachable = False
        self._term: int | None = None
        self.sent = 0
        self.last_tick = time.monotonic()
        super().__init__(*args, **kwargs)
        probes.beat_started(self)

    # --- the loop ---------------------------------------------------------------------------

    def tick(self, *args: Any, **kwargs: Any) -> float:
        self.last_tick = time.monotonic()
        if not _keeper_wanted["on"]:
            self.election.step_if_due()  # no keeper thread (a scheduler made in a test)
        term = self.election.term()
        if term is None:
            self._term = None
            return max(0.05, min(self.election.poll, self.election.until_next_step()))
        if term != self._term:  # just became leader (or took its own lease back after an outage)
            self._term = term
            self._reload()
        try:
            interval = super().tick(*args, **kwargs)
        except (*self.connection.connection_errors, OperationalError) as exc:
            # No connection to the broker for the send of a claimed tick: that tick is lost (nothing
            # reaches a broker that is away); the loop goes on, and so do the lease's renewals.
            self._broker_away(exc)
            self._reload()
            interval = 1.0
        except (DatabaseError, InterfaceError) as exc:  # reading the schedule
            close_old_connections()
            with self.election.lock:
                self.election.database_failed(exc)
            self._reload()
            return max(0.05, min(self.election.poll, self.election.until_next_step()))
        return max(0.0, min(interval, self.election.seconds / 2))

    def schedule_changed(self) -> bool:
        """django-celery-beat's check for schedule changes, without its traceback per tick while
        the database is away: the outage is the election's to report (once, then per retry)."""
        try:
            close_old_connections()
            with contextlib.suppress(transaction.TransactionManagementError):
                transaction.commit()
            last, stamp = self._last_timestamp, self.Changes.last_change()
        except (DatabaseError, InterfaceError) as exc:
            close_old_connections()
            with self.election.lock:
                self.election.database_failed(exc)
            return False
        self._last_timestamp = stamp
        return bool(stamp and stamp > (last or stamp))

    def _broker_away(self, exc: Exception) -> None:
        """Say once per outage that sends fail (the loop tries again every tick)."""
        self.__dict__.pop("producer", None)
        if not self._unreachable:
            self._unreachable = True
            log.warning(
                "beat: the broker is unreachable (%s); periodic tasks are sent again once it answers", exc
            )

    def _reload(self) -> None:
        """A new leader starts from the schedule as stored: what the last leader sent."""
        self._initial_read = True
        self._heap = None
        self.old_schedulers = None

    # --- one tick of one entry: claim, then send --------------------------------------------

    def reserve(self, entry: ClaimedEntry) -> ClaimedEntry:
        new_entry = next(entry)
        self._claim_won = entry.claimable and self._claim(entry, new_entry)
        self._claimed_run_at = new_entry.last_run_at
        if self._claim_won:
            new_entry.stored, new_entry.claimable = new_entry.last_run_at, True
            if self._schedule is not None:  # a heap rebuilt from the schedule starts from this one
                self._schedule[entry.name] = new_entry
        return new_entry

    def _claim(self, entry: ClaimedEntry, new_entry: ClaimedEntry) -> bool:
        held = self.election.held
        if held is None or not held.valid():
            return False
        name, pk, previous, run_at = entry.name, entry.model.pk, entry.stored, new_entry.last_run_at
        try:
            with leases.lease_fenced(held) as renewed:
                rows = PeriodicTask.objects.filter(pk=pk)
                rows = (
                    rows.filter(last_run_at=previous) if previous else rows.filter(last_run_at__isnull=True)
                )
                claimed = bool(rows.update(last_run_at=run_at, total_run_count=F("total_run_count") + 1))
                if not claimed:
                    transaction.set_rollback(True)  # the renewal too: the lease stays as it was
            if claimed:
                with self.election.lock:
                    self.election.held = renewed
        except leases.LeaseLost as exc:
            with self.election.lock:
                self.election.lose(str(exc))
            return False
        except (DatabaseError, InterfaceError) as exc:  # not sent: the next leader's tick covers it
            close_old_connections()
            with self.election.lock:
                self.election.database_failed(exc)
            return False
        if not claimed:
            log.warning(
                "beat: %s: its tick was claimed since this beat read it; reloading the schedule", name
            )
            self._reload()
            return False
        return True

    def apply_entry(self, entry: Any, producer: Any = None) -> None:
        if not self._claim_won:
            return
        self._claim_won = False
        held = self.election.held
        headers = dict(entry.options.get("headers") or {})
        # Which leader sent which tick: the term, the holder and the claimed run time.
        headers.update(
            beat_term=held.term if held else 0,
            beat_holder=self.election.holder,
            beat_run_at=self._claimed_run_at.isoformat() if self._claimed_run_at else None,
        )
        entry.options = {**entry.options, "headers": headers}
        try:
            self.apply_async(entry, producer=producer, advance=False)
        except Exception as exc:  # the broker is away: this tick is lost, the next one goes out
            self._broker_away(exc)
            return
        if self._unreachable:
            self._unreachable = False
            log.info("beat: the broker answers again; sending periodic tasks")
        self.sent += 1

    @property
    def producer(self) -> Any:
        """The producer, connected now or never: waiting for an absent broker (Celery retries
        for ever) would stop the loop, and with it the renewals of the lease (a chaos run saw
        three leaders in one outage, each stuck in its first send)."""
        if "producer" not in self.__dict__:
            connection = self.connection
            connection.ensure_connection(max_retries=1, interval_start=0, interval_step=0, timeout=2)
            self.__dict__["producer"] = self.Producer(connection, auto_declare=False)
        return self.__dict__["producer"]

    def sync(self) -> None:
        """Nothing to write: each claim wrote its entry's ``last_run_at`` when it was made (a
        write-back of stale values by a process that lost the lease would undo a newer claim)."""
        self._dirty.clear()

    def close(self) -> None:
        try:
            super().close()
        finally:
            self.election.stop()
            with self.election.lock:
                self.election.release()
            probes.beat_stopped()


# Set in a beat process (``celery beat`` sends beat_init): its scheduler's lease is kept by a thread.
_keeper_wanted = {"on": False}


@signals.beat_init.connect
def _beat_started(sender: Any = None, **_: Any) -> None:
    """Say which process this is among the beats (the election follows in its own lines), and
    start the thread that keeps the lease."""
    log.info(
        "beat: %s starts standing by (lease %r, %g s)", holder_id(), LEASE_NAME, settings.BEAT_LEASE_SECONDS
    )
    _keeper_wanted["on"] = True
    scheduler = getattr(sender, "scheduler", None)
    if isinstance(scheduler, ElectedScheduler):
        scheduler.election.keep()
