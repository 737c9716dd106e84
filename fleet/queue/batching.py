"""Group commit: concurrent callers share one round trip.

The listener asks Redis about the reconcile mark for every WatchEvent, from many threads at once.
Each ask alone is a round trip (a send, a wait, a receive, a pooled connection taken and given
back), which costs more than the rest of the request. Here callers that arrive while a round trip
is under way queue their asks; when it returns, one of them (the next *leader*) sends all queued
asks in one pipeline, and each caller gets its own answer. A lone caller pays nothing extra: it is
its own leader and sends at once. No timer, no background thread: nobody waits for a batch to
fill, only for the round trip ahead of it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class _Slot(Generic[T]):
    __slots__ = ("done", "error", "item", "lead", "result")

    def __init__(self, item: T) -> None:
        self.item = item
        # A one-shot signal: a lock taken now and released when the answer is there. Cheaper
        # than an Event (no condition, no list of waiters) and there is only ever one waiter.
        self.done = threading.Lock()
        self.done.acquire()
        self.lead = False
        self.result: Any = None
        self.error: BaseException | None = None


class GroupCommit(Generic[T, R]):
    """``call(item)`` returns ``run([items...])[i]`` for its item; concurrent calls share a run.

    ``run`` gets the items in arrival order and returns one answer per item, or an exception
    instance in an item's place; if ``run`` raises, every caller of that batch gets the error.
    """

    def __init__(self, run: Callable[[Sequence[T]], Sequence[R | BaseException]], limit: int = 256) -> None:
        self._run = run
        self._limit = limit
        self._lock = threading.Lock()
        self._pending: list[_Slot[T]] = []
        self._busy = False

    def call(self, item: T) -> R:
        slot: _Slot[T] = _Slot(item)
        with self._lock:
            self._pending.append(slot)
            lead = not self._busy
            self._busy = True
        if not lead:
            slot.done.acquire()
            if not slot.lead:
                return self._answer(slot)
        self._lead()
        return self._answer(slot)

    def _lead(self) -> None:
        with self._lock:
            batch, self._pending = self._pending[: self._limit], self._pending[self._limit :]
        try:
            answers = self._run([slot.item for slot in batch])
        except Exception as exc:  # handed to every caller of the batch
            for slot in batch:
                slot.error = exc
        else:
            for slot, answer in zip(batch, answers, strict=True):
                if isinstance(answer, BaseException):
                    slot.error = answer
                else:
                    slot.result = answer
        with self._lock:
            successor = self._pending[0] if self._pending else None
            if successor is None:
                self._busy = False
            else:
                successor.lead = True  # it runs the next batch when it wakes
        for slot in batch:
            slot.lead = False
            slot.done.release()  # held since the slot was made (or again since its waiter woke)
        if successor is not None:
            successor.done.release()

    @staticmethod
    def _answer(slot: _Slot[T]) -> Any:
        if slot.error is not None:
            raise slot.error
        return slot.result
