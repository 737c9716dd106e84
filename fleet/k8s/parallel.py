"""Independent calls to one runtime made at once: a runtime is far away (20-150 ms a round trip),
so a reconcile that writes eight objects in any order waits about three round trips, not eight.

Each call at once needs a connection of its own, and a new connection costs a TCP and a TLS
handshake first (about two round trips); between reconciles a runtime's client keeps one
(:meth:`fleet.k8s.client.RuntimeClient.keep_one_connection`). So fewer than ``AT_ONCE_FROM`` calls
go one after the other on the connection there is, unless the client holds an idle connection for
each (opened by earlier calls of the same reconcile), and more go at once,
``RUNTIME_PARALLEL_CALLS`` at a time.

The calls run on one thread pool per process, shared by every reconcile the process runs; the
calling thread makes the first call of each group itself. The calls must not touch the database
(their threads hold no connection): they are runtime API calls, and what they return is handled
by the caller, in order.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import TypeVar

from django.conf import settings

T = TypeVar("T")

# Fewer calls than this go one after the other: at once, they would wait one round trip and the
# two of a new connection's handshakes, and cost the CPU of those handshakes.
AT_ONCE_FROM = 4

_lock = threading.Lock()
_pool: tuple[int, ThreadPoolExecutor] | None = None  # (the process it was made in, the pool)


def _executor() -> ThreadPoolExecutor:
    """The process's pool (made at first use, and again in a forked child: threads do not survive
    a fork): room for every pool thread of a worker to have its calls in flight at once."""
    global _pool
    with _lock:
        if _pool is None or _pool[0] != os.getpid():
            size = max(1, settings.CELERY_WORKER_CONCURRENCY * (settings.RUNTIME_PARALLEL_CALLS - 1))
            _pool = (os.getpid(), ThreadPoolExecutor(max_workers=size, thread_name_prefix="runtime-call"))
        return _pool[1]


def all_at_once(calls: Sequence[Callable[[], T]], *, idle: Callable[[], int] = lambda: 0) -> list[T]:
    """Each call's result, in order. From ``AT_ONCE_FROM`` calls on, or when there are ``idle()``
    connections for all of them (asked only then), they run at once, ``RUNTIME_PARALLEL_CALLS`` at
    a time; when any raised, the first of them (in order) is raised once all have finished, so no
    call is left running behind the caller's back."""
    at_once = settings.RUNTIME_PARALLEL_CALLS
    if len(calls) <= 1 or at_once <= 1 or (len(calls) < AT_ONCE_FROM and idle() < len(calls)):
        return [call() for call in calls]
    results: list[T] = []
    for start in range(0, len(calls), at_once):
        results.extend(_group(calls[start : start + at_once]))
    return results


def _group(calls: Sequence[Callable[[], T]]) -> list[T]:
    futures: list[Future[T]] = [_executor().submit(call) for call in calls[1:]]
    first: Future[T] = Future()
    try:
        first.set_result(calls[0]())
    except BaseException as exc:  # (raised below, once the others finished)
        first.set_exception(exc)
    wait(futures)
    for future in (first, *futures):
        if (exc := future.exception()) is not None:
            raise exc
    return [future.result() for future in (first, *futures)]
