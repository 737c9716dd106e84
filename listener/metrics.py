"""Listener metrics (upstream's names where they exist, and correct: they move).

Upstream's in-flight gauge is incremented after the handler returns and its error counter looks
at a field that is never set, so neither moves; here in-flight is incremented around the handler
and every answer is counted by status code.
"""

import bisect
import functools
import os
import threading
import time

from prometheus_client import Counter, Gauge, Histogram

REQUESTS = Counter(
    "watcher_listener_requests_total", "WatchEvent requests by contract and status code", ["contract", "code"]
)
REQUEST_ERRORS = Counter(
    "watcher_listener_request_errors_total", "Requests answered with a non-200 status", ["code"]
)
DURATION = Histogram(
    "watcher_listener_request_duration_seconds",
    "Time to answer a WatchEvent request",
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
)
# Upstream's name and shape (a gauge: the last request's duration in seconds, labelled
# server_name="listener"), kept for dashboards built on it; the histogram above is the useful one.
LAST_DURATION = Gauge(
    "watcher_listener_request_duration",
    "Duration of the most recent request in seconds (upstream's gauge)",
    ["server_name"],
    multiprocess_mode="mostrecent",
).labels(server_name="listener")
IN_FLIGHT = Gauge(
    "watcher_listener_inflight_requests", "Requests being handled now", multiprocess_mode="livesum"
)
TOO_LARGE = Counter(
    "watcher_listener_exceeding_size_limit_requests_total", "Requests refused for a body over 16 KiB"
)
FAILED_VERIFICATION = Counter(
    "watcher_listener_failed_verification_requests_total",
    "Requests whose client certificate was missing, untrusted or not allowed",
    ["reason"],
)
# Every reason a request can be refused for (listener.identity's IdentityError reasons, and a valid
# certificate for another runtime), each series at 0 from the start: upstream's metric name is on a
# fresh listener's /metrics, as every upstream name is, not only after the first refusal.
VERIFICATION_REASONS = (
    "missing",
    "empty-cn",
    "untrusted",
    "unreadable",
    "header-too-long",
    "untrusted-proxy",
)
VERIFICATION_REASONS += ("not-allowed",)
for _reason in VERIFICATION_REASONS:
    FAILED_VERIFICATION.labels(reason=_reason)
EVENTS = Counter(
    "watcher_listener_events_total", "Accepted WatchEvents by component and outcome", ["component", "outcome"]
)
HEARTBEATS = Counter("watcher_listener_heartbeats_total", "Runtime watcher heartbeats by result", ["result"])
RECORDS_DROPPED = Counter(
    "watcher_listener_event_records_dropped_total",
    "Event records not written (database unavailable too long)",
)


# Labelled children, resolved once: the label lookup is measurable at thousands of requests a second.
@functools.lru_cache(maxsize=256)
def request_counter(contract: str, code: int) -> Counter:
    return REQUESTS.labels(contract=contract, code=str(code))


@functools.lru_cache(maxsize=1024)
def event_counter(component: str, outcome: str) -> Counter:
    return EVENTS.labels(component=component, outcome=outcome)


BOUNDS = tuple(DURATION._upper_bounds)  # the histogram's own bounds; the last one is +Inf


class Tally:
    """The hot path's metrics, summed in the process and written to the registry in one go.

    In multiprocess mode every ``inc``/``observe`` is a locked write into a memory-mapped file;
    per request that was seven writes (in-flight up and down, requests, errors, events, duration
    histogram, last duration). Here a request adds to plain counters, and the totals are written
    at most every ``FLUSH_EVERY`` seconds under load (one write per changed series per flush),
    and ``IDLE_FLUSH`` seconds after the process fell idle (if it still is), by a background
    thread: writing them each time no request was in flight cost a fifth of the application's
    time under load (with several threads that is after almost every request; bench/listener.py
    row (a')).
    """

    FLUSH_EVERY = 0.1
    IDLE_FLUSH = 0.01

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._idle = threading.Event()
        self._pid: int | None = None
        self._in_flight = 0
        self._flushed_at = 0.0
        self._reset()

    def _reset(self) -> None:
        self._requests: dict[tuple[str, int], int] = {}
        self._events: dict[tuple[str, str], int] = {}
        self._buckets = [0] * len(BOUNDS)
        self._sum = 0.0
        self._last: float | None = None

    def begin(self) -> None:
        with self._lock:
            self._in_flight += 1

    def event(self, component: str, outcome: str) -> None:
        with self._lock:
            key = (component, outcome)
            self._events[key] = self._events.get(key, 0) + 1

    def end(self, label: str, status: int, elapsed: float) -> None:
        index = bisect.bisect_left(BOUNDS, elapsed)
        with self._lock:
            self._in_flight -= 1
            key = (label, status)
            self._requests[key] = self._requests.get(key, 0) + 1
            self._buckets[index] += 1
            self._sum += elapsed
            self._last = elapsed
            due = time.monotonic() - self._flushed_at >= self.FLUSH_EVERY
            idle = self._in_flight == 0
        if due:
            self.flush()
        elif idle:
            if self._pid != os.getpid():  # first request of this process (or of a forked child)
                self._pid = os.getpid()
                threading.Thread(target=self._flush_when_idle, name="metrics-flush", daemon=True).start()
            if not self._idle.is_set():  # a flush is due already: no wake-up to send
                self._idle.set()

    def _flush_when_idle(self) -> None:
        while True:
            self._idle.wait()
            time.sleep(self.IDLE_FLUSH)  # requests arriving meanwhile join this flush
            self._idle.clear()
            # Busy again: the requests in flight flush when one is due, or the last of them to
            # end wakes this thread again. Under load the process is idle for moments many
            # times a second, and a flush each time was 2 % of its CPU (py-spy, bench/listener.py).
            if self._in_flight == 0:
                self.flush()

    def flush(self) -> None:
        """Write the totals since the last flush (one writer at a time, in order)."""
        with self._flush_lock:
            with self._lock:
                requests, events, buckets, total, last = (
                    self._requests,
                    self._events,
                    self._buckets,
                    self._sum,
                    self._last,
                )
                in_flight = self._in_flight
                self._reset()
                self._flushed_at = time.monotonic()
            for (label, status), count in requests.items():
                request_counter(label, status).inc(count)
                if status != 200:
                    REQUEST_ERRORS.labels(code=str(status)).inc(count)
            for (component, outcome), count in events.items():
                event_counter(component, outcome).inc(count)
            # The histogram's own per-bucket values and sum: prometheus_client has no "observe
            # many", and one observe per request is the write this class saves.
            for index, count in enumerate(buckets):
                if count:
                    DURATION._buckets[index].inc(count)
            if total:
                DURATION._sum.inc(total)
            if last is not None:
                LAST_DURATION.set(last)
            IN_FLIGHT.set(in_flight)


TALLY = Tally()
