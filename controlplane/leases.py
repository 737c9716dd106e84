"""Leases with fencing in the database: one of several processes of a role is active.

What it guarantees, to whom (beat's election, :mod:`controlplane.beat`):

- At most one holder per lease name at any moment *of the database's clock*: a take succeeds only
  on a lease that is free or ran out (``expires_at <= now()``), in one conditional UPDATE.
- A holder that stops renewing (SIGKILL, node lost, paused, cut off from the database) loses the
  lease ``seconds`` after its last renewal at the latest; a holder that stops on purpose
  releases it at once (:func:`lease_release`), so a standby takes over on its next try.
- Fencing: every take starts a new ``term``. Work that must happen once is done inside
  :func:`lease_fenced`, a transaction that first renews the lease *for the term the caller
  holds*; if the lease ran out or changed hands since, nothing of that transaction is written.
  A holder that was paused past its lease therefore cannot act on a term it no longer holds,
  whatever its own clock says.

State: one :class:`controlplane.models.Lease` row per name. Times come from the database
(``Now()``), the one clock every host shares; a holder's own view of how long it may still act
(:attr:`Held.valid_until`) is measured from *before* its last renewal was sent, so it is never
later than the database's. It works on PostgreSQL and on SQLite (the quickstart) alike.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace

from django.db import transaction
from django.db.models import F, Q
from django.db.models.functions import Now

from controlplane.models import Lease


class LeaseLost(Exception):
    """The lease ran out or changed hands: the fenced work was not done."""


@dataclass(frozen=True)
class Held:
    """A lease this process holds: for ``term``, since ``acquired_at`` (database time), and by
    its own monotonic clock until ``valid_until`` at the latest."""

    name: str
    holder: str
    term: int
    seconds: float
    acquired_at: dt.datetime
    valid_until: float

    def valid(self) -> bool:
        return time.monotonic() < self.valid_until


def _until(seconds: float) -> object:
    return Now() + dt.timedelta(seconds=seconds)


def lease_acquire(*, name: str, holder: str, seconds: float) -> Held | None:
    """Take the lease ``name`` for ``seconds`` if it is free or ran out, or is this holder's own
    (a holder that stopped acting on it, e.g. while its database was away, takes it back at once
    rather than waiting for it to run out): a new term either way, so whatever the holder still
    keeps of the old term is fenced off. ``None`` when someone else holds it."""
    Lease.objects.get_or_create(name=name)
    sent = time.monotonic()
    taken = (
        Lease.objects.filter(name=name)
        .filter(Q(expires_at__isnull=True) | Q(expires_at__lte=Now()) | Q(holder=holder))
        .update(
            holder=holder,
            term=F("term") + 1,
            acquired_at=Now(),
            renewed_at=Now(),
            expires_at=_until(seconds),
        )
    )
    if not taken:
        return None
    row = Lease.objects.get(name=name)
    if row.holder != holder:  # taken by another in between (it ran out again at once): not ours
        return None
    return Held(name, holder, row.term, seconds, row.acquired_at, sent + seconds)


def lease_renew(held: Held) -> Held | None:
    """Extend the lease for the term held; ``None`` when it was lost (ran out, or changed hands)."""
    sent = time.monotonic()
    renewed = Lease.objects.filter(
        name=held.name, holder=held.holder, term=held.term, expires_at__gt=Now()
    ).update(renewed_at=Now(), expires_at=_until(held.seconds))
    return replace(held, valid_until=sent + held.seconds) if renewed else None


def lease_release(held: Held) -> bool:
    """Give the lease up now (the holder stops on purpose): a standby may take it at once."""
    return bool(
        Lease.objects.filter(name=held.name, holder=held.holder, term=held.term).update(expires_at=Now())
    )


@contextmanager
def lease_fenced(held: Held) -> Iterator[Held]:
    """A transaction whose writes happen only while ``held`` is still the lease's current term:
    the lease is renewed first, inside it (its row stays locked until the commit, so it cannot
    change hands meanwhile); raises :class:`LeaseLost` otherwise. Yields the renewed lease."""
    with transaction.atomic():
        renewed = lease_renew(held)
        if renewed is None:
            raise LeaseLost(f"lease {held.name!r} term {held.term} is no longer held by {held.holder}")
        yield renewed


def lease_current(name: str) -> Lease | None:
    """The lease's row as stored now (``None`` before anyone asked for it)."""
    return Lease.objects.filter(name=name).first()


def lease_is_live(lease: Lease, now: dt.datetime) -> bool:
    """Whether someone holds ``lease`` at ``now`` (by the times stored)."""
    return bool(lease.holder and lease.expires_at and lease.expires_at > now)
