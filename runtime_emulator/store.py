"""The object store of one emulated API server: objects, the resourceVersion counter, watch feed.

Stored objects are never mutated after they are stored: every write stores a new dict. Readers
(HTTP responses, watch events, Python assertions) can therefore hold on to a stored object
without copying it, and unchanged parts may be shared between objects.

The event log that lets a watch resume from a list's resourceVersion is only kept once someone
has listed or watched (most emulated runtimes are only ever written to), holds small tuples, and
coalesces: a resumed watch gets the latest state of each changed object, in resourceVersion
order, rather than every intermediate state (keeping those would hold every object's old versions
alive in thousands of runtimes). It remembers each object's labels from before the range, so a
resumed watch with a label selector still tells an object that left the selection (DELETED) from
one that entered it (ADDED).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Iterator
from typing import Any, NamedTuple

Key = tuple[str, str]  # (namespace or "", name)
# ("ADDED" | "MODIFIED" | "DELETED", object, the version it replaced: None unless MODIFIED)
Event = tuple[str, dict[str, Any], dict[str, Any] | None]
LOG_SIZE = 256


class _Logged(NamedTuple):
    rv: int
    storage: str
    key: Key
    type: str
    gone: dict[str, Any] | None  # the last state of a deleted object
    labels_before: Any  # the labels of the version this change replaced (None: ADDED)


class Change(NamedTuple):
    """An object's changes since a resourceVersion, coalesced (see the module docstring)."""

    existed: bool  # whether it existed at that resourceVersion
    labels_before: Any  # its labels then
    obj: dict[str, Any]  # its state now (its last state if it was deleted)
    removed: bool


class Store:
    """Objects by storage (``plural.group``) and (namespace, name)."""

    __slots__ = ("_buckets", "_floor", "_log", "_rv", "_watchers")

    def __init__(self) -> None:
        self._rv = 0
        self._buckets: dict[str, dict[Key, dict[str, Any]]] = {}
        self._log: deque[_Logged] | None = None
        self._floor = 0
        self._watchers: dict[str, set[asyncio.Queue[Event]]] | None = None

    @property
    def resource_version(self) -> int:
        """The last resourceVersion handed out."""
        return self._rv

    def get(self, storage: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        """The stored object, or ``None``."""
        bucket = self._buckets.get(storage)
        return bucket.get((namespace or "", name)) if bucket else None

    def objects(self, storage: str, namespace: str | None = None) -> list[dict[str, Any]]:
        """Objects of one resource (optionally one namespace), in namespace/name order."""
        bucket = self._buckets.get(storage) or {}
        keys = sorted(k for k in bucket if namespace is None or k[0] == namespace)
        return [bucket[k] for k in keys]

    def in_namespace(self, namespace: str) -> Iterator[tuple[str, dict[str, Any]]]:
        """Every object in a namespace (a snapshot: safe to modify the store meanwhile)."""
        for storage, bucket in list(self._buckets.items()):
            for key, obj in list(bucket.items()):
                if key[0] == namespace:
                    yield storage, obj

    def storages(self) -> list[str]:
        """Storage keys that hold at least one object."""
        return list(self._buckets)

    def put(self, storage: str, obj: dict[str, Any], event: str) -> dict[str, Any]:
        """Store a new object version, stamping the next resourceVersion into it."""
        self._rv += 1
        metadata = obj["metadata"]
        metadata["resourceVersion"] = str(self._rv)
        key = (metadata.get("namespace") or "", metadata["name"])
        bucket = self._buckets.setdefault(storage, {})
        old = bucket.get(key)
        bucket[key] = obj
        self._publish(storage, key, event, obj, old)
        return obj

    def remove(self, storage: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Drop an object; returns its final state, carrying the deletion's resourceVersion."""
        self._rv += 1
        metadata = obj["metadata"]
        key = (metadata.get("namespace") or "", metadata["name"])
        bucket = self._buckets.get(storage) or {}
        bucket.pop(key, None)
        if not bucket:
            self._buckets.pop(storage, None)
        gone = {**obj, "metadata": {**metadata, "resourceVersion": str(self._rv)}}
        self._publish(storage, key, "DELETED", gone, obj)
        return gone

    def _publish(
        self, storage: str, key: Key, event: str, obj: dict[str, Any], old: dict[str, Any] | None
    ) -> None:
        if self._log is not None:
            if len(self._log) == self._log.maxlen:
                self._floor = self._log[0].rv
            labels = None if old is None else old["metadata"].get("labels") or {}
            gone = obj if event == "DELETED" else None
            self._log.append(_Logged(self._rv, storage, key, event, gone, labels))
        if self._watchers is not None:
            change = (event, obj, old if event == "MODIFIED" else None)
            for queue in self._watchers.get(storage, ()):
                queue.put_nowait(change)

    def start_log(self) -> None:
        """Begin keeping the watch-resume log (called by the first list or watch)."""
        if self._log is None:
            self._log = deque(maxlen=LOG_SIZE)
            self._floor = self._rv

    def changes_since(self, storage: str, rv: int) -> list[Change] | None:
        """Coalesced changes after ``rv``, in the order of their last change; ``None`` when they
        are no longer known (410 Expired)."""
        if rv >= self._rv:
            return []
        if self._log is None or rv < self._floor:
            return None
        first: dict[Key, _Logged] = {}
        last: dict[Key, _Logged] = {}
        for entry in self._log:
            if entry.rv > rv and entry.storage == storage:
                first.setdefault(entry.key, entry)
                last[entry.key] = entry
        changes: list[Change] = []
        for key, entry in sorted(last.items(), key=lambda item: item[1].rv):
            start = first[key]
            existed = start.type != "ADDED"
            if entry.gone is not None:
                if existed:
                    changes.append(Change(True, start.labels_before, entry.gone, True))
                continue
            current = self.get(storage, *key)
            if current is not None:
                changes.append(Change(existed, start.labels_before, current, False))
        return changes

    def subscribe(self, storage: str) -> asyncio.Queue[Event]:
        """A queue receiving every later event of one storage (for a watch)."""
        queue: asyncio.Queue[Event] = asyncio.Queue()
        if self._watchers is None:
            self._watchers = {}
        self._watchers.setdefault(storage, set()).add(queue)
        return queue

    def unsubscribe(self, storage: str, queue: asyncio.Queue[Event]) -> None:
        """Stop feeding a watch's queue."""
        if self._watchers is not None:
            self._watchers.get(storage, set()).discard(queue)
