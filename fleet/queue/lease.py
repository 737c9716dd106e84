"""The reconcile lease: never two reconciles of one Kyma at once, and a dead worker felt for seconds.

A reconcile holds a lease (``lease_owner``/``lease_until`` on the Kyma's ``ReconcileState`` row,
never on the Kyma row an operator edits) taken with one conditional upsert; a task that finds it
taken re-arms its mark and retries shortly (:class:`fleet.queue.retry.LeaseBusy`). The owner names
the thread too: with Celery's threads pool, one process runs many reconciles, and a reconcile
whose lease ran out must not extend or release the lease another thread took since.

The lease is short (``RECONCILE_LEASE_SECONDS``, 8 s) and *renewed while the reconcile runs*: a
keeper thread per worker process (:class:`_Keeper`) extends every lease the process holds with one
UPDATE every quarter of the lease, whatever the reconcile is doing (a slow runtime call included).
So a reconcile whose process dies frees its Kyma within the lease (beat's sweep takes it back
within ``RECONCILE_SWEEP_INTERVAL`` more and queues the Kyma again, :func:`lease_abandoned_take`),
while one that lives keeps it as long as it runs. A reconcile counts its lease as lost (and stops
at its next step, :class:`LeaseKeeper`) when the keeper could not renew it (another holder took
it) or has not renewed it for a whole lease (the database was away): then another worker may hold
it, and this one must not write again. A runtime call in flight at that moment may still land
(bounded by ``RUNTIME_READ_TIMEOUT``): the reconcile is level-based and idempotent, and the next
holder applies the same desired state.

A lease this process could not release because the database was away (the reconcile met the
outage) is remembered and released by the next reconcile this process starts
(:func:`lease_release_unreleased`): its Kyma does not wait for the lease to run out.

A worker that is told to stop (SIGTERM: a rolling update, a node drained) calls
:func:`hand_back_all`: every reconcile it runs stops at its next step (between two runtime calls)
with :class:`WorkerStopping`, releases its lease and queues its Kyma again, so the shutdown takes
one runtime call at most rather than a whole slow reconcile.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import socket
import threading
import time

from django.conf import settings
from django.db import DatabaseError, connection
from django.utils import timezone

from fleet.models import Kyma, ReconcileState
from fleet.models.bookkeeping import KYMA_WITH_ROWS

from .retry import WorkerStopping

log = logging.getLogger(__name__)
TABLE = ReconcileState._meta.db_table
KYMAS = Kyma._meta.db_table
_handing_back = threading.Event()


def hand_back_all() -> None:
    """This process stops: every reconcile it runs hands its Kyma back at its next step."""
    _handing_back.set()


def handing_back() -> bool:
    return _handing_back.is_set()


_process: tuple[int, str] = (0, "")


def worker_id() -> str:
    """Who holds a lease: ``host:process:thread`` (the thread's per call: pool threads share the
    process; the process's part once per process, made again in a forked one)."""
    global _process
    pid = os.getpid()
    if _process[0] != pid:
        _process = (pid, f"{socket.gethostname()}:{pid}")
    return f"{_process[1]}:{threading.get_native_id()}"


def _lease_seconds() -> float:
    return float(settings.RECONCILE_LEASE_SECONDS)


# Take the lease when it is free: one upsert, which makes the Kyma's ``ReconcileState`` row on its
# first reconcile. (The SELECT's WHERE also tells SQLite's parser where the upsert clause begins.)
_TAKE = (
    f"INSERT INTO {TABLE} (kyma_id, lease_owner, lease_until, error_streak) "
    f"SELECT id, %s, %s, 0 FROM {KYMAS} WHERE id = %s ON CONFLICT (kyma_id) DO UPDATE SET "
    "lease_owner = excluded.lease_owner, lease_until = excluded.lease_until "
    f"WHERE {TABLE}.lease_until IS NULL OR {TABLE}.lease_until <= %s"
)


def _take_params(kyma_id: int, owner: str) -> list:
    now = timezone.now()
    adapt = connection.ops.adapt_datetimefield_value
    return [owner, adapt(now + dt.timedelta(seconds=_lease_seconds())), kyma_id, adapt(now)]


def lease_acquire(kyma_id: int, *, owner: str | None = None) -> bool:
    """Take the Kyma's lease when it is free (never taken, released, or run out): one upsert,
    which makes the Kyma's ``ReconcileState`` row on its first reconcile. False when another
    holds it, or when there is no such Kyma."""
    owner = owner or worker_id()
    with connection.cursor() as cursor:
        cursor.execute(_TAKE + " RETURNING kyma_id", _take_params(kyma_id, owner))
        taken = cursor.fetchone() is not None
    if taken:
        KEEPER.hold(kyma_id, owner, inline=connection.in_atomic_block)
    return taken


def lease_acquire_read(kyma_id: int, *, owner: str | None = None) -> Kyma | None:
    """:func:`lease_acquire`, then the Kyma read under the lease with the rows beside it
    (``KYMA_WITH_ROWS``, its ``ReconcileState`` as the lease left it). On PostgreSQL both are
    one statement: one round trip less on the way into every reconcile. ``None`` when another
    holds the lease, or when there is no such Kyma."""
    owner = owner or worker_id()
    if connection.vendor != "postgresql":
        if not lease_acquire(kyma_id, owner=owner):
            return None
        try:
            kyma = KYMA_WITH_ROWS.get(kyma_id)
        except BaseException:
            lease_release(kyma_id, owner=owner)
            raise
        if kyma is None:  # gone since (a forced delete): nothing to hold
            lease_release(kyma_id, owner=owner)
        return kyma
    kyma = KYMA_WITH_ROWS.get_after(
        kyma_id, _TAKE + " RETURNING *", _take_params(kyma_id, owner), table=TABLE
    )
    if kyma is not None:
        KEEPER.hold(kyma_id, owner, inline=connection.in_atomic_block)
    return kyma


def lease_extend(kyma_id: int, *, owner: str | None = None) -> bool:
    """Push the lease forward now; False means it was lost (the keeper does this by itself)."""
    owner = owner or worker_id()
    until = timezone.now() + dt.timedelta(seconds=_lease_seconds())
    return bool(ReconcileState.objects.filter(kyma_id=kyma_id, lease_owner=owner).update(lease_until=until))


_unreleased: set[tuple[int, str]] = set()
_unreleased_lock = threading.Lock()


def lease_release(kyma_id: int, *, owner: str | None = None) -> None:
    owner = owner or worker_id()
    KEEPER.drop(kyma_id, owner)
    try:
        ReconcileState.objects.filter(kyma_id=kyma_id, lease_owner=owner).update(
            lease_owner="", lease_until=None
        )
    except DatabaseError:
        with _unreleased_lock:
            _unreleased.add((kyma_id, owner))
        raise


def lease_released(kyma_id: int, owner: str) -> None:
    """The reconcile's final write released the lease (``reconciler.status``): stop renewing it."""
    KEEPER.drop(kyma_id, owner)


def lease_abandoned_take(*, limit: int) -> list[int]:
    """Kymas whose lease ran out without being released (its holder died mid-reconcile): the
    leases are cleared (each only if still the one found) and the Kymas returned, for a new
    reconcile. A holder that was only cut off finds its lease gone at its next step and stops."""
    now = timezone.now()
    found = list(
        ReconcileState.objects.filter(lease_until__lt=now)
        .exclude(lease_owner="")
        .values_list("kyma_id", "lease_owner", "lease_until")[:limit]
    )
    return [
        kyma_id
        for kyma_id, owner, until in found
        if ReconcileState.objects.filter(kyma_id=kyma_id, lease_owner=owner, lease_until=until).update(
            lease_owner="", lease_until=None
        )
    ]


def lease_release_unreleased() -> None:
    """Release the leases this process failed to release (the database was away); no query
    when there are none. One that fails again stays for the next call."""
    with _unreleased_lock:
        pending = list(_unreleased)
        _unreleased.clear()
    for number, (kyma_id, owner) in enumerate(pending):
        try:
            ReconcileState.objects.filter(kyma_id=kyma_id, lease_owner=owner).update(
                lease_owner="", lease_until=None
            )
        except DatabaseError:
            with _unreleased_lock:
                _unreleased.update(pending[number:])
            raise


class _Keeper:
    """Renews every lease this process holds, with one UPDATE per round (a quarter of the lease),
    from a thread of its own (started with the first lease, again in a forked child). Knows, for
    each held lease, until when it is surely still ours (:meth:`valid`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[tuple[int, str], float] = {}  # -> monotonic time until which it is ours
        self._lost: set[tuple[int, str]] = set()
        self._inline: set[tuple[int, str]] = set()  # renewed by their holders (see hold)
        self._pid = 0
        self._wake = threading.Event()

    def hold(self, kyma_id: int, owner: str, *, inline: bool = False) -> None:
        """Keep this lease renewed; ``inline``: it was taken inside a transaction (a caller's
        ``atomic`` block, a test's), where the keeper's own connection cannot see its row, so its
        holder renews it between steps instead (:meth:`renew_inline`)."""
        with self._lock:
            # a margin for the clocks: the lease's own time is the database's, counted from the
            # moment the statement ran, a little before now
            self._held[(kyma_id, owner)] = time.monotonic() + _lease_seconds() * 0.9
            self._lost.discard((kyma_id, owner))
            if inline:
                self._inline.add((kyma_id, owner))
                return
            self._inline.discard((kyma_id, owner))
            if self._pid != os.getpid():
                self._pid = os.getpid()
                threading.Thread(target=self._run, name="lease-keeper", daemon=True).start()

    def drop(self, kyma_id: int, owner: str) -> None:
        with self._lock:
            self._held.pop((kyma_id, owner), None)
            self._lost.discard((kyma_id, owner))
            self._inline.discard((kyma_id, owner))

    def valid(self, kyma_id: int, owner: str) -> bool:
        """Whether the lease is still ours: renewed in time and never found taken."""
        with self._lock:
            until = self._held.get((kyma_id, owner))
            return until is not None and (kyma_id, owner) not in self._lost and time.monotonic() < until

    def renew_inline(self, kyma_id: int, owner: str) -> None:
        """A lease held inside a transaction, renewed from its holder's thread (its connection)
        once a quarter of the lease has passed since the last renewal."""
        key = (kyma_id, owner)
        with self._lock:
            until = self._held.get(key)
            due = key in self._inline and key not in self._lost and until is not None
            due = due and until - time.monotonic() < _lease_seconds() * 0.65
        if not due:
            return
        started = time.monotonic()
        renewed = lease_extend(kyma_id, owner=owner)
        with self._lock:
            if key in self._held:
                if renewed:
                    self._held[key] = started + _lease_seconds() * 0.9
                else:
                    self._lost.add(key)

    def renew_now(self) -> None:
        """One round at once (tests)."""
        self._renew()

    def _run(self) -> None:
        pid = os.getpid()
        while self._pid == pid:
            self._wake.wait(max(0.05, _lease_seconds() / 4))
            self._wake.clear()
            try:
                self._renew()
            except DatabaseError as exc:  # the leases run out by themselves: their holders stop
                log.warning("could not renew the reconcile leases of this process: %s", exc)
                connection.close()
            except Exception:  # never let the keeper die: the leases would silently run out
                log.exception("renewing the reconcile leases failed")

    def _renew(self) -> None:
        with self._lock:
            held = [key for key in self._held if key not in self._lost and key not in self._inline]
        if not held:
            connection.close()  # (idle: no connection kept open for nothing)
            return
        started = time.monotonic()
        until = timezone.now() + dt.timedelta(seconds=_lease_seconds())
        renewed: set[tuple[int, str]] = set()
        for start in range(0, len(held), 500):
            chunk = held[start : start + 500]
            pairs = " OR ".join(["(kyma_id = %s AND lease_owner = %s)"] * len(chunk))
            with connection.cursor() as cursor:
                cursor.execute(
                    f"UPDATE {TABLE} SET lease_until = %s WHERE {pairs} RETURNING kyma_id, lease_owner",
                    [connection.ops.adapt_datetimefield_value(until)]
                    + [value for key in chunk for value in key],
                )
                renewed.update((row[0], row[1]) for row in cursor.fetchall())
        with self._lock:
            for key in held:
                if key not in self._held:
                    continue  # released meanwhile
                if key in renewed:
                    self._held[key] = started + _lease_seconds() * 0.9
                else:
                    self._lost.add(key)


KEEPER = _Keeper()


class LeaseKeeper:
    """What a reconcile asks between its steps: is the lease still ours? (No query: the keeper
    thread renews it.) Raises :class:`WorkerStopping` once the worker is stopping."""

    def __init__(self, kyma_id: int, owner: str) -> None:
        self.kyma_id = kyma_id
        self.owner = owner

    def __call__(self) -> bool:
        """False when the lease was lost (another worker took over, or it could not be renewed);
        raises :class:`WorkerStopping` once the worker is stopping."""
        if _handing_back.is_set():
            raise WorkerStopping(f"the worker stops: Kyma {self.kyma_id} is handed back")
        KEEPER.renew_inline(self.kyma_id, self.owner)
        return KEEPER.valid(self.kyma_id, self.owner)
