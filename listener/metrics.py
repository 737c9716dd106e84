"""Listener metrics (upstream's names where they exist, and correct: they move).

Upstream's in-flight gauge is incremented after the handler returns and its error counter looks
at a field that is never set, so neither moves; here in-flight is incremented around the handler
and every answer is counted by status code.
"""

import functools

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
