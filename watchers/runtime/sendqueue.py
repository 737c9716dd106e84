"""The bounded, coalescing queue between admission handling and the sender.

Why a queue: upstream POSTs to the control plane inside the admission call (with retries, up to
minutes), so a slow or unreachable control plane stalls the Kubernetes API server's webhook call.
Here the admission handler only calls :meth:`SendQueue.offer` and answers at once.

Why coalescing: a WatchEvent only says "this object changed, reconcile". Ten pending events for
the same object (component, namespace, name, GVK) carry no more information than one, so an
identical offer merges into the pending entry. If the entry is being sent right now, it is marked
``dirty`` and sent once more afterwards: the change it reports may have happened after the
in-flight request was written.

Why bounded: memory in the runtime cluster is small and an unreachable control plane must not
grow the watcher without limit. When full, a new (non-coalescable) event is dropped and the
admission message says so.

The queue is an insertion-ordered dict keyed by the event identity: the entry in flight stays in
it (so it counts toward the depth and the capacity), a failed entry moves to the back so one
rejected event cannot block the others.
"""

from __future__ import annotations

import enum
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field

from watchers.runtime.review import WatchEvent


class OfferResult(enum.Enum):
    QUEUED = "queued"
    COALESCED = "coalesced"
    DROPPED = "dropped"


@dataclass(frozen=True)
class QueuedEvent:
    """A WatchEvent and the component (URL path segment) it is delivered for."""

    component: str
    event: WatchEvent

    @property
    def key(self) -> tuple[str, str, str, str, str, str]:
        gvk = self.event.gvk
        return (self.component, self.event.namespace, self.event.name, gvk.group, gvk.version, gvk.kind)


@dataclass
class Entry:
    item: QueuedEvent
    enqueued_at: float = field(default_factory=time.monotonic)
    attempts: int = 0
    in_flight: bool = False
    dirty: bool = False


class SendQueue:
    """Thread-safe; many producers (admission threads), one consumer (the sender)."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        self._entries: OrderedDict[tuple[str, ...], Entry] = OrderedDict()
        self._cond = threading.Condition()
        self._woken = False

    def __len__(self) -> int:
        with self._cond:
            return len(self._entries)

    def offer(self, item: QueuedEvent) -> OfferResult:
        """Queue ``item`` unless an identical one is pending; drop it when the queue is full."""
        with self._cond:
            entry = self._entries.get(item.key)
            if entry is not None:
                entry.item = item  # the newest change (an in-flight body was written already)
                if entry.in_flight:
                    entry.dirty = True
                return OfferResult.COALESCED
            if len(self._entries) >= self.capacity:
                return OfferResult.DROPPED
            self._entries[item.key] = Entry(item)
            self._cond.notify()
            return OfferResult.QUEUED

    def take(self, timeout: float | None) -> Entry | None:
        """The oldest entry not in flight, waiting up to ``timeout``; None on timeout or :meth:`wake`."""
        with self._cond:
            entry = self._first_ready()
            if entry is None and not self._woken:
                self._cond.wait(timeout)
                entry = self._first_ready()
            self._woken = False
            if entry is not None:
                entry.in_flight = True
                entry.attempts += 1
            return entry

    def _first_ready(self) -> Entry | None:
        for entry in self._entries.values():
            if not entry.in_flight:
                return entry
        return None

    def has_ready(self) -> bool:
        with self._cond:
            return self._first_ready() is not None

    def complete(self, entry: Entry, delivered: bool) -> None:
        """Finish the in-flight ``entry``: remove it when delivered, else move it to the back."""
        with self._cond:
            entry.in_flight = False
            if self._entries.get(entry.item.key) is not entry:  # drained at shutdown meanwhile
                return
            if delivered and not entry.dirty:
                self._entries.pop(entry.item.key, None)
                return
            if delivered:
                entry.attempts = 0
            # A failed entry is retried anyway, so a newer identical offer needs no extra send.
            entry.dirty = False
            self._entries.move_to_end(entry.item.key)

    def wake(self) -> None:
        """Make a waiting :meth:`take` return now (shutdown, configuration change)."""
        with self._cond:
            self._woken = True
            self._cond.notify_all()

    def drain(self) -> list[QueuedEvent]:
        """Remove and return everything still queued (at shutdown, to count and log it)."""
        with self._cond:
            items = [entry.item for entry in self._entries.values()]
            self._entries.clear()
            return items
