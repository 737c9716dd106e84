"""What both stores of the queue mark share: the interface, what a starting task learns, FULL."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from django.conf import settings

# A Kyma counts as busy (its runtime keeps changing) this long after an event found it spaced or
# found a task of it queued already.
BUSY_FOR = 5.0
# A line of a mark's changes: a request it covers asked for a full reconcile (it said nothing of
# what changed), or a change was left out for want of room (``MAX_CHANGES``). Never left out itself.
FULL = "*"


@dataclass(frozen=True)
class Started:
    """What a starting task learns from the mark it clears: the time before which it must not
    read the runtime, and the changes (encoded) the runtime must have stored before it reads.
    ``found``: there was a mark (a task that finds none was redelivered or retried after it lost
    it, or its mark expired: what it covers is unknown)."""

    not_before: dt.datetime | None = None
    changes: tuple[str, ...] = ()
    found: bool = False
    # The spacing asked for with the start (``space_until``) was set: it held no time before.
    spaced: bool = False

    @property
    def full(self) -> bool:
        """Whether the task must read everything: a request asked for it, or a change was left
        out (past ``MAX_CHANGES``; both say :data:`FULL`), or there was no mark to say."""
        return not self.found or FULL in self.changes


class ReconcileFlags(Protocol):
    def claim(
        self, kyma_ids: Sequence[int], now: dt.datetime, eta: dt.datetime, *, full: bool = False
    ) -> list[int]:
        """Mark the Kymas that are not marked yet, for a task due at ``eta``; return those (the
        caller then publishes). ``full``: the request asks for a full reconcile, so the marks of
        the others (their task has not started) say so too (:data:`FULL`)."""

    def claim_one(
        self,
        kyma_id: int,
        now: dt.datetime,
        eta: dt.datetime,
        need: dt.datetime | None,
        changes: Sequence[str] = (),
        fallback: dt.datetime | None = None,
    ) -> tuple[bool, dt.datetime]:
        """Mark one Kyma in one round trip. Returns (this call claimed it, the earliest time the
        task reads the runtime): a claim is for a task due at ``eta``, or later while the Kyma is
        spaced (:meth:`space`); else the task already queued from now on does not read before
        ``need`` (``None``: no such time) and checks ``changes`` too, and the time returned is the
        later of its ETA and its "not before". Past ``MAX_CHANGES`` on one mark, further changes
        ask for ``fallback`` as "not before" instead, and the mark says :data:`FULL` (which
        always finds room). An ETA set on another host counts only ``LISTENER_CLOCK_SKEW``
        earlier (that host's clock may run ahead)."""

    def space(self, kyma_id: int, until: dt.datetime | None, *, if_free: bool = False) -> bool:
        """A reconcile starts and the next one must wait for ``RECONCILE_MIN_SPACING``: a claim
        until then is for a task due then, published with that countdown at once (the task
        would otherwise start, find it is too soon and retry). Only a hint: the task checks the
        spacing itself. ``None`` clears it; ``if_free`` sets it only when none holds now.
        Returns whether it was set."""

    def busy(self, kyma_ids: Sequence[int]) -> set[int]:
        """Which of these Kymas are *busy*: their runtime kept changing lately (less than
        ``BUSY_FOR`` seconds ago an event found the Kyma spaced, or a task of it queued already;
        on the database: a reconcile of it was spaced)."""

    def release(self, kyma_ids: Sequence[int], eta: dt.datetime) -> None:
        """Undo a claim made for ``eta`` (its publish failed)."""

    def claim_urgent(self, kyma_ids: Sequence[int], now: dt.datetime) -> list[int]:
        """The second mark: an urgent task is queued beside the one the first mark says (which
        may be spaced). Marks the Kymas without it; returns those. Same TTL."""

    def started_urgent(self, kyma_id: int) -> None:
        """An urgent task starts: later urgent requests must queue a new one."""

    def started(self, kyma_id: int, *, space_until: dt.datetime | None = None) -> Started:
        """A task starts: later requests must queue a new one. Returns the time before which the
        task must not read the runtime, if requests asked for one, and the changes to check.
        ``space_until``: also :meth:`space` the Kyma until then ``if_free``, as the mark goes
        (``Started.spaced`` says whether it was set)."""

    def queued(self, kyma_ids: Sequence[int]) -> set[int]:
        """Which of these Kymas are marked now."""

    def queued_count(self) -> int: ...

    def overdue(self, before: dt.datetime, limit: int) -> list[tuple[int, str]]:
        """Marks whose task was due before ``before`` and has not started: (Kyma, the mark's ETA
        as stored, to re-claim exactly that mark with :meth:`refresh`)."""

    def refresh(self, kyma_id: int, eta: str, now: dt.datetime) -> bool:
        """Move an overdue mark's ETA (as :meth:`overdue` returned it) to ``now`` and its expiry
        to a full TTL from now, keeping what it says; False when it moved on meanwhile (its task
        started, or another refresh took it)."""


def mark_lines(changes: Sequence[str], *, full: bool) -> list[str]:
    """The lines a new mark carries: the changes, and FULL once when the request is full."""
    return [*changes, FULL] if full and FULL not in changes else list(changes)


def mark_ttl() -> dt.timedelta:
    return dt.timedelta(seconds=settings.RECONCILE_QUEUED_TTL)


def clock_skew() -> dt.timedelta:
    return dt.timedelta(seconds=settings.LISTENER_CLOCK_SKEW)


def to_stamp(moment: dt.datetime) -> str:
    return f"{moment.timestamp():.6f}"


def from_stamp(stamp: bytes | str) -> dt.datetime:
    return dt.datetime.fromtimestamp(float(stamp), dt.UTC)
