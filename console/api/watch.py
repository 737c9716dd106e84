"""``GET /api/v1/moduleconfigs/?watch=true``: ModuleConfig changes streamed as they happen.

Like a Kubernetes watch: one JSON object per line, ``{"type": "ADDED|MODIFIED|DELETED|BOOKMARK",
"object": {...}}``, ordered by revision. A watch from ``since_revision=N`` first sends every change
after N (the catch-up), then a BOOKMARK marking the end of it, then each change as it is committed,
and a BOOKMARK every ``MODULECONFIG_WATCH_BOOKMARK_INTERVAL`` seconds carrying the revision up to
which the watcher has everything. Resuming from the last revision received (a change's
``metadata.resourceVersion`` or a bookmark's) loses nothing and repeats nothing.

Why exact: revisions are gap-free and commit in order (``RevisionCounter``), so every read below
is bounded by the committed counter (the *ceiling*): all revisions up to it are visible, and a
change above it comes in a later read. A watch subscribes to its process's ``ChangeHub`` first and
catches up from the database second, so the two overlap and changes at or below what it has sent
are skipped. An object changed twice between reads is sent once, in its latest state.

Serving: one web process has one ``ChangeHub`` thread. It wakes on PostgreSQL ``LISTEN`` (or Redis
pub/sub, or polls on SQLite), reads the new revisions once, renders each document once, and hands
them to every watch of that process; a watch thread only waits on a condition and writes lines,
with no database connection while it waits. Gunicorn gives each web process ``WEB_WATCH_THREADS``
threads for watches beside ``WEB_THREADS`` (``deploy/gunicorn/web.py``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import psycopg
import redis
from django.conf import settings
from django.db import DatabaseError, close_old_connections, connection

from fleet.models import ModuleConfig, ModuleConfigDeletion, RevisionCounter
from fleet.resources.kinds import FLEET_API_VERSION, KYMA_NAME_LABEL, MODULE_NAME_LABEL, ModuleConfigKind
from fleet.services import revisions
from fleet.services import watches as watch_services

log = logging.getLogger(__name__)
# Changes a hub keeps for its watches; a watch that falls further behind reads the database again.
HUB_LOG_SIZE = 10_000
# Seconds between reads while PostgreSQL LISTEN or Redis pub/sub is unavailable.
DEGRADED_POLL = 0.5
# Seconds before LISTEN (or pub/sub) is tried again after it failed (e.g. the database was out of
# connections for a moment): meanwhile watches are woken by polling, every DEGRADED_POLL.
LISTEN_RETRY = 5.0


class Change(NamedTuple):
    revision: int
    module: str
    created_revision: int
    deleted: bool
    document: dict[str, Any]


def _deleted_document(tombstone: ModuleConfigDeletion) -> dict[str, Any]:
    return {
        "apiVersion": FLEET_API_VERSION,
        "kind": "ModuleConfig",
        "metadata": {
            "name": tombstone.name,
            "namespace": tombstone.namespace,
            "uid": str(tombstone.uid),
            "resourceVersion": str(tombstone.revision),
            "labels": {KYMA_NAME_LABEL: tombstone.kyma_name, MODULE_NAME_LABEL: tombstone.module_name},
        },
        "spec": {
            "kyma": tombstone.kyma_name,
            "runtimeID": tombstone.runtime_id,
            "module": tombstone.module_name,
        },
    }


def committed_revision() -> int:
    value = RevisionCounter.objects.filter(name=ModuleConfig.REVISION_SEQUENCE).values_list(
        "value", flat=True
    )
    return value.first() or 0


def changes_after(revision: int, *, module: str = "") -> tuple[int, list[Change]]:
    """Changes after ``revision`` up to the committed ceiling; returns ``(ceiling, changes)``."""
    ceiling = committed_revision()
    if ceiling <= revision:
        return revision, []
    configs = ModuleConfig.objects.select_related("kyma", "module").filter(
        revision__gt=revision, revision__lte=ceiling
    )
    deletions = ModuleConfigDeletion.objects.filter(revision__gt=revision, revision__lte=ceiling)
    if revision == 0:  # a watcher starting from nothing has nothing to delete
        deletions = deletions.none()
    if module:
        configs = configs.filter(module__name=module)
        deletions = deletions.filter(module_name=module)
    kind = ModuleConfigKind()
    found = [
        Change(c.revision, c.module.name, c.created_revision, False, kind.to_document(c)) for c in configs
    ]
    found += [Change(d.revision, d.module_name, 0, True, _deleted_document(d)) for d in deletions]
    found.sort(key=lambda change: change.revision)
    return ceiling, found


class _Waker:
    """Blocks until a revision may have been committed (or the timeout passes)."""

    def wait(self, timeout: float) -> None:
        time.sleep(timeout)

    def close(self) -> None:
        pass


class _PostgresWaker(_Waker):
    def __init__(self) -> None:
        db = connection.settings_dict
        self.conn = psycopg.connect(
            dbname=db["NAME"],
            user=db["USER"] or None,
            password=db["PASSWORD"] or None,
            host=db["HOST"] or None,
            port=db["PORT"] or None,
            autocommit=True,
        )
        self.conn.execute(f"LISTEN {revisions.CHANNEL}")

    def wait(self, timeout: float) -> None:
        for _ in self.conn.notifies(timeout=timeout, stop_after=1):
            pass

    def close(self) -> None:
        self.conn.close()


class _RedisWaker(_Waker):
    def __init__(self) -> None:
        client = redis.Redis.from_url(settings.MODULECONFIG_WATCH_REDIS_URL, socket_connect_timeout=2)
        self.pubsub = client.pubsub(ignore_subscribe_messages=True)
        self.pubsub.subscribe(f"{settings.RECONCILE_FLAGS_PREFIX}:{revisions.CHANNEL}")

    def wait(self, timeout: float) -> None:
        self.pubsub.get_message(timeout=timeout)

    def close(self) -> None:
        self.pubsub.close()


def _waker() -> _Waker:
    """PostgreSQL LISTEN, else Redis pub/sub, else plain polling (SQLite without Redis)."""
    if connection.vendor == "postgresql":
        return _PostgresWaker()
    if settings.MODULECONFIG_WATCH_REDIS_URL:
        return _RedisWaker()
    return _Waker()


def _poll() -> float:
    return settings.MODULECONFIG_WATCH_POLL_INTERVAL


class ChangeHub:
    """The process's reader of new revisions, shared by all its watches (a daemon thread)."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.log: list[Change] = []
        self.first_index = 0  # stream index of log[0]
        self.position: int | None = None  # everything up to this revision is in the log
        self.slots: set[int] = set()
        self.thread: threading.Thread | None = None
        self.closing = False

    def shutdown(self) -> None:
        """The process is stopping: every watch ends now (its client resumes elsewhere) instead
        of holding the graceful shutdown until its timeout. Called from gunicorn's SIGTERM hook."""
        with self.cond:
            self.closing = True
            self.cond.notify_all()

    def ensure_started(self, timeout: float = 10) -> None:
        with self.cond:
            if self.thread is None or not self.thread.is_alive():
                # A restarted hub keeps its position: it reads on from there, so no watch misses
                # what was committed meanwhile.
                self.thread = threading.Thread(target=self._run, name="moduleconfig-watch-hub", daemon=True)
                self.thread.start()
            if not self.cond.wait_for(lambda: self.position is not None, timeout):
                raise DatabaseError("the watch hub could not read the revisions")

    @property
    def end_index(self) -> int:
        return self.first_index + len(self.log)

    def _run(self) -> None:
        announced = connection.vendor == "postgresql" or bool(settings.MODULECONFIG_WATCH_REDIS_URL)
        waker: _Waker | None = None
        retry_at = 0.0  # when to try LISTEN / pub/sub again after it failed
        renew_at = time.monotonic() + settings.MODULECONFIG_WATCH_BOOKMARK_INTERVAL
        while True:
            try:
                if waker is None or (announced and type(waker) is _Waker and time.monotonic() >= retry_at):
                    try:  # listen first, read second: nothing committed in between goes unheard
                        waker = _waker()
                    except (psycopg.Error, redis.RedisError, OSError) as exc:
                        log.warning("watch announcements unavailable (%s): polling meanwhile", exc)
                        waker, retry_at = _Waker(), time.monotonic() + LISTEN_RETRY
                self._read()
                if time.monotonic() >= renew_at:
                    renew_at = time.monotonic() + settings.MODULECONFIG_WATCH_BOOKMARK_INTERVAL
                    with self.cond:
                        slots = list(self.slots)
                    watch_services.watch_slots_renew(slot_ids=slots)
                degraded = announced and type(waker) is _Waker
                waker.wait(min(_poll(), DEGRADED_POLL) if degraded else _poll())
            except DatabaseError as exc:
                log.warning("watch hub: %s", exc)
                connection.close()
                time.sleep(1)
            except (psycopg.Error, redis.RedisError, OSError) as exc:  # LISTEN or pub/sub lost
                log.warning("watch hub announcements: %s; listening again", exc)
                with contextlib.suppress(psycopg.Error, redis.RedisError, OSError):
                    if waker is not None:
                        waker.close()
                waker = None

    def _read(self) -> None:
        if self.position is None:
            position = committed_revision()
            with self.cond:
                self.position = position
                self.cond.notify_all()
            return
        ceiling, changes = changes_after(self.position)
        with self.cond:
            self.log.extend(changes)
            if len(self.log) > 2 * HUB_LOG_SIZE:  # trimmed in halves: slicing stays cheap
                dropped = len(self.log) - HUB_LOG_SIZE
                del self.log[:dropped]
                self.first_index += dropped
            self.position = ceiling
            self.cond.notify_all()


HUB = ChangeHub()
# Watches this process may serve at once: its WEB_WATCH_THREADS.
CAPACITY = threading.BoundedSemaphore(settings.WEB_WATCH_THREADS)
# Watches of this process that open at once. Opening uses the database (authentication, the slot,
# the catch-up) and a waiting watch uses none, so a burst of managers opening their watches takes
# at most this many connections per process, not one each (100 at once exhausted PostgreSQL's
# max_connections, and the hub's LISTEN fell back to polling).
OPENING_AT_ONCE = 4
OPENING_WAIT = 30.0  # seconds a watch waits for its turn to open before the answer is 503
OPENING = threading.BoundedSemaphore(OPENING_AT_ONCE)


class OpeningTurn:
    """One watch's turn to open: taken before its request touches the database, given back (with
    the thread's connection closed) once its catch-up is read, or when it fails before that."""

    def __init__(self) -> None:
        self.held = OPENING.acquire(timeout=OPENING_WAIT)

    def release(self) -> None:
        if self.held:
            self.held = False
            connection.close()
            OPENING.release()


def _line(kind: str, document: dict[str, Any]) -> bytes:
    return json.dumps({"type": kind, "object": document}, separators=(",", ":")).encode() + b"\n"


def bookmark(revision: int, *, initial_end: bool = False) -> bytes:
    metadata: dict[str, Any] = {"resourceVersion": str(revision)}
    if initial_end:
        metadata["annotations"] = {"k8s.io/initial-events-end": "true"}
    return _line("BOOKMARK", {"apiVersion": FLEET_API_VERSION, "kind": "ModuleConfig", "metadata": metadata})


class WatchStream:
    """The body of one watch response. ``close()`` (called by Django when the response ends or
    the client went away, even if streaming never began) gives back the slot and the thread."""

    def __init__(
        self,
        *,
        since: int,
        module: str,
        slot_id: int,
        timeout: float,
        hub: ChangeHub = HUB,
        turn: OpeningTurn | None = None,
        visible: Callable[[dict[str, Any]], bool] | None = None,
    ) -> None:
        self.since, self.module, self.slot_id, self.timeout, self.hub = since, module, slot_id, timeout, hub
        self.turn = turn
        # A scoped person's watch: only the ModuleConfigs of Kymas in its scope (access.scope).
        self.visible = visible or (lambda document: True)
        self.closed = False
        with hub.cond:
            hub.slots.add(slot_id)

    def __iter__(self) -> Iterator[bytes]:
        return self._events()

    @staticmethod
    def _emit(change: Change, seen: int) -> bytes:
        """``seen``: the watcher has every change up to it, so it knows an object created by then."""
        kind = "DELETED" if change.deleted else "ADDED" if change.created_revision > seen else "MODIFIED"
        return _line(kind, change.document)

    def _catch_up(self, after: int) -> tuple[int, list[bytes]]:
        try:
            ceiling, changes = changes_after(after, module=self.module)
        finally:
            connection.close()  # no database connection while the watch waits
        return ceiling, [self._emit(c, after) for c in changes if self.visible(c.document)]

    def _events(self) -> Iterator[bytes]:
        hub = self.hub
        hub.ensure_started()
        with hub.cond:
            cursor = hub.end_index  # subscribed before the catch-up: the two overlap
        try:
            seen, lines = self._catch_up(self.since)
        finally:
            if self.turn is not None:
                self.turn.release()
        yield from lines
        yield bookmark(seen, initial_end=True)
        now = time.monotonic()
        deadline = now + self.timeout
        next_bookmark = now + settings.MODULECONFIG_WATCH_BOOKMARK_INTERVAL
        while now < deadline and not hub.closing:
            with hub.cond:
                if cursor >= hub.end_index:
                    hub.cond.wait(max(0.0, min(deadline, next_bookmark) - now))
                behind = cursor < hub.first_index
                new = hub.log[cursor - hub.first_index :] if not behind else []
                cursor, position = hub.end_index, hub.position or 0
            if behind:  # the hub dropped changes this watch had not read yet
                ceiling, lines = self._catch_up(seen)
                yield from lines
                seen = max(seen, ceiling)
                continue
            for change in new:
                if (
                    change.revision > seen
                    and (not self.module or change.module == self.module)
                    and self.visible(change.document)
                ):
                    yield self._emit(change, seen)
            seen = max(seen, position)
            now = time.monotonic()
            if now >= next_bookmark:
                next_bookmark = now + settings.MODULECONFIG_WATCH_BOOKMARK_INTERVAL
                yield bookmark(seen)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.turn is not None:
            self.turn.release()  # never streamed (the client left first)
        with self.hub.cond:
            self.hub.slots.discard(self.slot_id)
        try:
            close_old_connections()
            watch_services.watch_slot_release(slot_id=self.slot_id)
        except DatabaseError as exc:  # the slot expires by itself
            log.warning("could not release watch slot %s: %s", self.slot_id, exc)
        finally:
            connection.close()
            CAPACITY.release()
