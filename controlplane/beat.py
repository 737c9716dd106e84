"""Beat, elected: several ``celery -A controlplane beat`` processes, one sends, the others stand by.

Guarantees (the periodic work of :data:`settings.CELERY_BEAT_SCHEDULE`: sweeps, renewals, checks):

- One process leads: it holds the ``beat`` lease (:mod:`controlplane.leases`, a database row)
  and renews it every third of ``BEAT_LEASE_SECONDS``; the others try to take it every
  ``BEAT_STANDBY_POLL`` seconds. A leader that dies (SIGKILL, node lost) is replaced within
  ``BEAT_LEASE_SECONDS`` plus one poll; one that stops on purpose (SIGTERM, a rolling update)
  releases the lease and is replaced within one poll.
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

import datetime as dt
import logging
import os
import socket
import threading
import time
from typing import Any

from celery import signals
from django.conf import settings
from django.db import DatabaseError, InterfaceError, close_old_connections, transaction
from django.db.models import F
from django_celery_beat.models import PeriodicTask
from django_celery_beat.schedulers import DatabaseScheduler, ModelEntry
from kombu.exceptions import OperationalError

from controlplane import leases, probes

log = logging.getLogger("controlplane.beat")

LEASE_NAME = "beat"


def holder_id() -> str:
    """Who this beat is: ``host:pid`` (the pod's name on Kubernetes)."""
    return f"{socket.gethostname()}:{os.getpid()}"


def _iso(moment: dt.datetime | None) -> str:
    return moment.astimezone(dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z") if moment else "-"


class Election:
    """This process's side of the ``beat`` lease: take it when free, renew it while held, give
    it up when stopping. :meth:`step` does what is due now; :meth:`leading` says whether this
    process may act (its lease still valid by its own clock)."""

    def __init__(self, *, holder: str, seconds: float, poll: float) -> None:
        self.holder = holder
        self.seconds = seconds
        self.poll = poll
        self.held: leases.Held | None = None
        self._next_try = 0.0
        self._renew_at = 0.0
        self._leader_seen: tuple[str, int] | None = None
        self.reached_database_at: float | None = None
        self.lock = threading.Lock()

    def leading(self) -> bool:
        return self.held is not None and self.held.valid()

    def step(self) -> bool:
        """Renew or take the lease when due; returns True when this process just became leader."""
        now = time.monotonic()
        try:
            if self.held is not None:
                if now >= self._renew_at or not self.held.valid():
                    renewed = leases.lease_renew(self.held)
                    self.reached_database_at = time.monotonic()
                    if renewed is None:
                        self.lose("it ran out or another beat took it")
                    else:
                        self.held = renewed
                        self._renew_at = time.monotonic() + self.seconds / 3
                return False
            if now < self._next_try:
                return False
            self._next_try = now + self.poll
            held = leases.lease_acquire(name=LEASE_NAME, holder=self.holder, seconds=self.seconds)
            self.reached_database_at = time.monotonic()
        except (DatabaseError, InterfaceError) as exc:
            close_old_connections()
            if self.held is not None and not self.held.valid():
                self.lose(f"the database is unreachable ({type(exc).__name__})")
            else:
                log.warning("beat: cannot reach the database for the lease: %s", exc)
            return False
        if held is None:
            self._standing_by()
            return False
        self.held = held
        self._renew_at = time.monotonic() + self.seconds / 3
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

    def lose(self, why: str) -> None:
        held, self.held = self.held, None
        self._next_try = time.monotonic() + self.poll
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
            log.warning("beat: could not release the lease (it runs out by itself): %s", exc)

    def until_next_step(self) -> float:
        if self.held is not None:
            return max(0.0, self._renew_at - time.monotonic())
        return max(0.0, self._next_try - time.monotonic())


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
        self._claim_won = False
        self._claimed_run_at: dt.datetime | None = None
        self._unreachable = False
        self.sent = 0
        self.last_tick = time.monotonic()
        super().__init__(*args, **kwargs)
        probes.beat_started(self)

    # --- the loop ---------------------------------------------------------------------------

    def tick(self, *args: Any, **kwargs: Any) -> float:
        self.last_tick = time.monotonic()
        with self.election.lock:
            became = self.election.step()
        if not self.election.leading():
            return max(0.05, min(self.election.poll, self.election.until_next_step()))
        if became:
            self._reload()
        try:
            interval = super().tick(*args, **kwargs)
        except (*self.connection.connection_errors, OperationalError) as exc:
            # No connection to the broker for the send of a claimed tick: that tick is lost (nothing
            # reaches a broker that is away); the loop goes on renewing the lease.
            self._broker_away(exc)
            self._reload()
            interval = 1.0
        return min(interval, self.election.until_next_step())

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
                self.election.held = renewed
        except leases.LeaseLost as exc:
            with self.election.lock:
                self.election.lose(str(exc))
            return False
        except (DatabaseError, InterfaceError) as exc:
            close_old_connections()
            log.warning("beat: %s not sent: cannot claim its tick in the database: %s", name, exc)
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
            with self.election.lock:
                self.election.release()
            probes.beat_stopped()


@signals.beat_init.connect
def _beat_started(sender: Any = None, **_: Any) -> None:
    """Say which process this is among the beats (the election follows in its own lines)."""
    log.info(
        "beat: %s starts standing by (lease %r, %g s)", holder_id(), LEASE_NAME, settings.BEAT_LEASE_SECONDS
    )
