"""Fault injection and request accounting for one emulated runtime.

Both are consulted on every request, so they are a few attributes and a Counter; nothing here
grows with the number of faults configured or requests served.
"""

from __future__ import annotations

import time
from collections import Counter

from kmock import KubernetesError

from runtime_emulator import errors

WRITE_VERBS = frozenset({"create", "update", "patch", "apply", "delete", "deletecollection"})
READ_VERBS = frozenset({"get", "list", "watch"})


class Faults:
    """Latency and error answers to inject (reachability is the emulator's: it owns the socket)."""

    __slots__ = ("_count", "_retry_after", "_status", "_until", "latency")

    def __init__(self) -> None:
        self.latency = 0.0  # seconds added before every answer
        self._status = 0
        self._count: int | None = None
        self._until: float | None = None
        self._retry_after = 1

    def fail_requests(
        self,
        status: int = 500,
        *,
        count: int | None = None,
        seconds: float | None = None,
        retry_after: int = 1,
    ) -> None:
        """Answer the next ``count`` requests / the next ``seconds`` (or all, if neither) with an error."""
        self._status, self._count, self._retry_after = status, count, retry_after
        self._until = time.monotonic() + seconds if seconds is not None else None

    def clear(self) -> None:
        """Stop injecting errors and latency."""
        self._status, self._count, self._until, self.latency = 0, None, None, 0.0

    def next_error(self) -> KubernetesError | None:
        """The error to answer the current request with, if a fault is active."""
        if not self._status:
            return None
        if (self._until is not None and time.monotonic() >= self._until) or self._count == 0:
            self._status = 0
            return None
        if self._count is not None:
            self._count -= 1
        if self._status == 429:
            return errors.too_many_requests(self._retry_after)
        if self._status == 503:
            return KubernetesError(
                503, "ServiceUnavailable", "the server is currently unable to handle the request", None
            )
        return errors.internal_error("injected fault")


class RequestCounts:
    """Requests received, by verb and resource (``deployments.apps``, ``pods/status``...), and
    how many were being served at once at most (``peak``: a client's calls made at once overlap
    while the emulator's latency holds them)."""

    __slots__ = ("_beside", "_counts", "_serving", "in_flight", "peak")

    def __init__(self) -> None:
        self._counts: Counter[tuple[str, str]] = Counter()
        self.in_flight = 0  # (served on one event loop: no lock)
        self.peak = 0
        self._serving: Counter[tuple[str, str]] = Counter()  # counted requests being served now
        self._beside: dict[tuple[str, str], set[tuple[str, str]]] = {}

    def started(self) -> None:
        """A request is being served (until :meth:`finished`)."""
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)

    def finished(self, counted: tuple[str, str] | None = None) -> None:
        """A request was answered (``counted``: its verb and resource, when :meth:`record` counted it)."""
        self.in_flight -= 1
        if counted is not None:
            self._serving[counted] -= 1

    def record(self, verb: str, resource: str) -> None:
        """Count one request (being served until :meth:`finished` says so)."""
        key = (verb, resource)
        self._counts[key] += 1
        for other, serving in self._serving.items():
            if serving > 0:
                self._beside.setdefault(key, set()).add(other)
                self._beside.setdefault(other, set()).add(key)
        self._serving[key] += 1

    def beside(self, verb: str, resource: str) -> set[tuple[str, str]]:
        """The (verb, resource) of the requests served at the same time as one of these: a client's
        calls made at once, while the emulator's latency holds their answers."""
        return set(self._beside.get((verb, resource), ()))

    def count(self, verb: str | None = None, resource: str | None = None) -> int:
        """Requests so far, optionally only of one verb and/or resource."""
        return sum(
            n
            for (v, r), n in self._counts.items()
            if (verb is None or v == verb) and (resource is None or r == resource)
        )

    @property
    def writes(self) -> int:
        """Create/update/patch/apply/delete(collection) requests so far."""
        return sum(n for (v, _), n in self._counts.items() if v in WRITE_VERBS)

    @property
    def reads(self) -> int:
        """Get/list/watch requests so far."""
        return sum(n for (v, _), n in self._counts.items() if v in READ_VERBS)

    @property
    def total(self) -> int:
        """All requests so far, discovery included."""
        return sum(self._counts.values())

    def snapshot(self) -> dict[tuple[str, str], int]:
        """A copy of the counts, keyed by (verb, resource)."""
        return dict(self._counts)

    def reset(self) -> None:
        """Start counting from zero (e.g. right before the operation under test)."""
        self._counts.clear()
        self._beside.clear()
        self.peak = self.in_flight
