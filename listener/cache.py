"""The listener's per-process caches of Kyma and Watcher look-ups, kept fresh ahead of use.

What they guarantee: an answer is never older than ``LISTENER_CACHE_SECONDS`` (counted from before
the query that read it), so a changed Kyma or Watcher is seen within that time. Misses (``None``)
are cached too, so an unknown runtime cannot make every request query.

Why refreshed ahead: a runtime's events are usually further apart than that time (a change now
and then, a heartbeat every 30 s), so an entry that only expired would be gone whenever the next
event came, and that event would wait for a query on its way to the queue (bench/e2e_latency.py
row (a): about half of the events paid 1-2 ms for it). So each worker process has one thread that, every
half ``LISTENER_CACHE_SECONDS``, reads again the entries asked for in the last ``KEPT_FOR``
seconds that would expire before its next round: one query per cache and up to ``CHUNK`` keys,
not one per event. An entry asked for no more (its runtime went quiet, or is gone) simply expires.
With ``LISTENER_CACHE_SECONDS=0`` nothing is cached and nothing is refreshed.

State: ``key -> (valid until, value)`` and ``key -> last asked at`` (monotonic seconds), both
under one lock for writes; reads of a fresh entry take no lock.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from django.conf import settings
from django.db import DatabaseError, close_old_connections, connection

log = logging.getLogger(__name__)

K = TypeVar("K")
V = TypeVar("V")

# Entries asked for within this many seconds are refreshed ahead: longer than a runtime watcher's
# heartbeat interval (30 s), so every connected runtime's entry stays fresh.
KEPT_FOR = 120.0
# Keys per refreshing query.
CHUNK = 500
# Entries per cache before it is emptied (bounded memory against many unknown runtimes).
MOST_ENTRIES = 50_000


class TTLCache(Generic[K, V]):
    """A tiny per-process cache: a burst of events costs one query, not one per event, and an
    event of a quiet runtime none (the :data:`REFRESHER` reads it again ahead of its expiry).

    ``load``: one key's value (``None``: there is none). ``load_many``: the values of several
    keys in one query (those it leaves out have none); without it, the refresher loads one by
    one. When an entry expires all the same (its key was not asked for lately), one thread loads
    it again while the others keep answering from the old one for that moment.
    """

    def __init__(
        self,
        load: Callable[[K], V | None],
        load_many: Callable[[Sequence[K]], dict[K, V]] | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._load = load
        self._load_many = load_many
        self._clock = clock
        self._entries: dict[K, tuple[float, V | None]] = {}
        self._asked: dict[K, float] = {}
        self._loading: set[K] = set()
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        now = self._clock()
        self._asked[key] = now
        entry = self._entries.get(key)
        if entry is not None and entry[0] > now:
            return entry[1]
        with self._lock:
            if entry is not None and key in self._loading:
                return entry[1]  # being loaded again by another thread
            self._loading.add(key)
        try:
            value = self._load(key)
        finally:
            with self._lock:
                self._loading.discard(key)
        self._store({key: value}, now)
        return value

    def _store(self, values: dict[K, V | None], loaded_at: float) -> None:
        until = loaded_at + settings.LISTENER_CACHE_SECONDS
        with self._lock:
            if len(self._entries) + len(values) > MOST_ENTRIES:
                self._entries.clear()
            for key, value in values.items():
                self._entries[key] = (until, value)

    def refresh_due(self, within: float) -> int:
        """Read again, now, the entries asked for in the last :data:`KEPT_FOR` seconds that
        expire within ``within`` seconds; forget when the others were asked for. Returns how many
        were read. Called by the :data:`REFRESHER`'s thread (and by tests, with their clock)."""
        now = self._clock()
        asked = list(self._asked.items())  # one step under the GIL: events add keys meanwhile
        with self._lock:
            due = []
            for key, at in asked:
                if now - at > KEPT_FOR:
                    if self._asked.get(key) == at:  # not asked for again meanwhile
                        self._asked.pop(key, None)
                elif key not in self._loading and self._entries.get(key, (0.0, None))[0] <= now + within:
                    due.append(key)
        for start in range(0, len(due), CHUNK):
            keys = due[start : start + CHUNK]
            loaded_at = self._clock()
            self._store(self._read(keys), loaded_at)
        return len(due)

    def _read(self, keys: Sequence[K]) -> dict[K, V | None]:
        if self._load_many is None:
            return {key: self._load(key) for key in keys}
        found = self._load_many(keys)
        return {key: found.get(key) for key in keys}

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._asked.clear()


class Refresher:
    """The thread of a listener worker process that keeps its caches' entries in use fresh
    (started by the gunicorn worker once it serves: ``deploy/gunicorn/listener.py``)."""

    def __init__(self) -> None:
        self._caches: list[TTLCache] = []
        self._lock = threading.Lock()
        self._pid = 0

    def add(self, cache: TTLCache) -> TTLCache:
        self._caches.append(cache)
        return cache

    def start(self) -> None:
        """Start the thread in this process (once); nothing to do when nothing is cached."""
        with self._lock:
            if settings.LISTENER_CACHE_SECONDS <= 0 or self._pid == os.getpid():
                return
            self._pid = os.getpid()
        threading.Thread(target=self._run, name="listener-cache-refresh", daemon=True).start()

    def round(self, every: float) -> None:
        """Refresh what is due in each cache before the next round, ``every`` seconds from now
        (a round late by up to half of that still finds every entry in use before it expires)."""
        for cache in self._caches:
            try:
                cache.refresh_due(within=every * 1.5)
            except Exception as exc:  # the database is away: the entries expire as they would
                log.debug("listener cache refresh failed: %s", exc)

    def _run(self) -> None:
        while True:
            every = settings.LISTENER_CACHE_SECONDS / 2
            time.sleep(every)
            with contextlib.suppress(DatabaseError):
                close_old_connections()  # as around a request: a broken or old connection goes
            self.round(every)
            if settings.DATABASE_POOLED:
                with contextlib.suppress(DatabaseError):
                    connection.close()  # back to the pool


REFRESHER = Refresher()
