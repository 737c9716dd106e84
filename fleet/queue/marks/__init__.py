"""Where the "a reconcile of this Kyma is queued and has not started" mark lives.

The mark is checked for every WatchEvent, so it must be cheap: with a Redis broker it lives in
Redis (one key with an expiry, one round trip, no load on PostgreSQL: :mod:`.redis_store`, its
Lua scripts in :mod:`.redis_scripts`); otherwise it is the Kyma's ``ReconcileMark`` row
(``queued_at``/``not_before``, and ``spaced_until``: :mod:`.database_store`), claimed with a read
and a conditional upsert (``INSERT ... ON CONFLICT DO UPDATE ... WHERE ... RETURNING``), never the
Kyma row an operator edits. :mod:`.base` holds what both stores share: the interface
(:class:`ReconcileFlags`), what a starting task learns (:class:`Started`), :data:`FULL`.
Both give the same guarantees (see :mod:`fleet.queue.requests`), and one behaviour suite
(``tests/fleet/test_marks.py``) holds both to them: one claimer wins, a mark older than
``RECONCILE_QUEUED_TTL`` counts as lost and can be claimed again, and a starting task clears the
mark before it reads any state.

A mark holds two times: the *ETA* of its task (it cannot start earlier: the broker holds it until
then) and *not before*, raised by requests that need the task to start later than its ETA (an
event that arrives just before the task is due: the runtime stores that change a moment after
the event). The starting task gets *not before* back and waits until then before reading.

A mark also carries the *changes* the events it covers reported (:mod:`.changes`; our runtime
watcher sends them): the union of them, so the starting task can check that the runtime stored
every one before it reads. A change added after the task started goes with the next mark.

And it says how much the task must read (:data:`FULL`): a reconcile whose requests all said what
changed (events that named their change, a module manager's SyncResource) need only read that;
any other request (an event that did not say, a user's "reconcile now", a job) asks the task to
read everything (see :mod:`reconciler.engine`). Coalesced requests keep the widest ask.
"""

from __future__ import annotations

import functools

from django.conf import settings

from .base import BUSY_FOR, FULL, ReconcileFlags, Started
from .database_store import DatabaseFlags
from .redis_store import RedisFlags

__all__ = ["BUSY_FOR", "FULL", "DatabaseFlags", "ReconcileFlags", "RedisFlags", "Started", "flags"]


@functools.cache
def _flags(url: str, prefix: str) -> ReconcileFlags:
    return RedisFlags(url, prefix) if url else DatabaseFlags()


def flags() -> ReconcileFlags:
    """The store of this deployment: Redis when ``RECONCILE_FLAGS_URL`` names one, else the database."""
    return _flags(settings.RECONCILE_FLAGS_URL, settings.RECONCILE_FLAGS_PREFIX)
