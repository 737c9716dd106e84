"""The reconcile lease: never two reconciles of one Kyma at once.

A reconcile holds a lease (``lease_owner``/``lease_until`` on the Kyma) taken with a conditional
UPDATE and extended between steps; a task that finds it taken re-arms its mark and retries
shortly (:class:`fleet.queue.retry.LeaseBusy`). A worker that dies loses the lease when it runs out.
The owner names the thread too: with Celery's threads pool, one process runs many reconciles, and
a reconcile whose lease ran out must not extend or release the lease another thread took since.

A lease this process could not release because the database was away (the reconcile met the
outage) is remembered and released by the next reconcile this process starts
(:func:`lease_release_unreleased`): its Kyma does not wait ``RECONCILE_LEASE_SECONDS`` for it.

A lease that ran out without being released is a reconcile that died with its worker (SIGKILL,
node lost) after it cleared its queue mark: nothing else says its work is undone (Redis gives the
worker's message back only after the visibility timeout, 600 s). Beat's sweep takes such leases
back and queues their Kymas again (:func:`lease_abandoned_take`).

A worker that is told to stop (SIGTERM: a rolling update, a node drained) calls
:func:`hand_back_all`: every reconcile it runs stops at its next step (between two runtime calls)
with :class:`WorkerStopping`, releases its lease and queues its Kyma again, so the shutdown takes
one runtime call at most rather than a whole slow reconcile.
"""

from __future__ import annotations

import datetime as dt
import os
import socket
import threading
import time

from django.conf import settings
from django.db import DatabaseError
from django.utils import timezone

from fleet.models import Kyma

from .retry import WorkerStopping

_handing_back = threading.Event()


def hand_back_all() -> None:
    """This process stops: every reconcile it runs hands its Kyma back at its next step."""
    _handing_back.set()


def handing_back() -> bool:
    return _handing_back.is_set()


def worker_id() -> str:
    """Who holds a lease: ``host:process:thread`` (computed per call: pool processes are forked,
    pool threads share the process)."""
    return f"{socket.gethostname()}:{os.getpid()}:{threading.get_native_id()}"


def lease_acquire(kyma_id: int, *, owner: str | None = None) -> bool:
    owner = owner or worker_id()
    now = timezone.now()
    until = now + dt.timedelta(seconds=settings.RECONCILE_LEASE_SECONDS)
    return bool(
        Kyma.objects.filter(id=kyma_id)
        .exclude(lease_until__gt=now)
        .update(lease_owner=owner, lease_until=until)
    )


def lease_extend(kyma_id: int, *, owner: str | None = None) -> bool:
    """Push the lease forward between reconcile steps; False means it was lost."""
    owner = owner or worker_id()
    until = timezone.now() + dt.timedelta(seconds=settings.RECONCILE_LEASE_SECONDS)
    return bool(Kyma.objects.filter(id=kyma_id, lease_owner=owner).update(lease_until=until))


_unreleased: set[tuple[int, str]] = set()
_unreleased_lock = threading.Lock()


def lease_release(kyma_id: int, *, owner: str | None = None) -> None:
    owner = owner or worker_id()
    try:
        Kyma.objects.filter(id=kyma_id, lease_owner=owner).update(lease_owner="", lease_until=None)
    except DatabaseError:
        with _unreleased_lock:
            _unreleased.add((kyma_id, owner))
        raise


def lease_abandoned_take(*, limit: int) -> list[int]:
    """Kymas whose lease ran out without being released (its holder died mid-reconcile): the
    leases are cleared (each only if still the one found) and the Kymas returned, for a new
    reconcile. A holder that was only slow finds its lease gone at its next step and stops."""
    now = timezone.now()
    found = list(
        Kyma.objects.filter(lease_until__lt=now)
        .exclude(lease_owner="")
        .values_list("id", "lease_owner", "lease_until")[:limit]
    )
    return [
        kyma_id
        for kyma_id, owner, until in found
        if Kyma.objects.filter(id=kyma_id, lease_owner=owner, lease_until=until).update(
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
            Kyma.objects.filter(id=kyma_id, lease_owner=owner).update(lease_owner="", lease_until=None)
        except DatabaseError:
            with _unreleased_lock:
                _unreleased.update(pending[number:])
            raise


class LeaseKeeper:
    """Extends a held lease between reconcile steps, but only once a third of it has passed: a
    reconcile that takes less time than that makes no extra query (and cannot have lost it)."""

    def __init__(self, kyma_id: int, owner: str) -> None:
        self.kyma_id = kyma_id
        self.owner = owner
        self.renewed = time.monotonic()

    def __call__(self) -> bool:
        """False when the lease was lost (another worker took over); raises
        :class:`WorkerStopping` once the worker is stopping."""
        if _handing_back.is_set():
            raise WorkerStopping(f"the worker stops: Kyma {self.kyma_id} is handed back")
        if time.monotonic() - self.renewed < settings.RECONCILE_LEASE_SECONDS / 3:
            return True
        if not lease_extend(self.kyma_id, owner=self.owner):
            return False
        self.renewed = time.monotonic()
        return True
