"""The sender thread: drains the send queue to the listener, retries, and sends heartbeats.

Delivery semantics (the admission message "kcp request succeeded" means *accepted for delivery*):

* Events are POSTed one at a time over the pooled connection, oldest first.
* Only HTTP 200 is success (upstream treats other 2xx as failures too). Any failure keeps the
  event queued, moves it to the back, and pauses all sending for an exponential backoff with jitter
  (``backoff_initial`` doubling up to ``backoff_max``, times a random factor in [0.5, 1]); the
  first success resets it. Pausing everything, not just one event, is deliberate: all events go to
  the same listener, and hammering a struggling control plane from every runtime at once is what
  backoff is meant to avoid. When the listener says how long to wait (``Retry-After`` on a 503 or
  429: its queue or database is briefly away), that wait replaces the backoff, spread over
  [1, 1.5] times it and never beyond ``backoff_max``: the events of an outage are sent again
  seconds after the control plane is back, not up to ``backoff_max`` later.
* Events are only dropped when the queue is full at admission time, or when they are still queued
  after the shutdown flush timeout.

Heartbeats (``POST /watcher/heartbeat``) go over the same connection but never take queue space:
one is sent when due and no event is waiting, or once it is a full interval overdue, so a busy
queue delays a heartbeat by at most one interval and a heartbeat delays events by one request.
A 404 means a control plane without the heartbeat route (e.g. upstream KLM); it is logged once and
not counted as a failure.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import random
import threading
import time
from collections.abc import Callable

from watchers.runtime.kcpclient import KcpClient, KcpError, timed_post
from watchers.runtime.logs import log_event
from watchers.runtime.metrics import REASON_FAILED_REQUEST, WatcherMetrics
from watchers.runtime.sendqueue import Entry, OfferResult, QueuedEvent, SendQueue

logger = logging.getLogger("watchers.runtime.sender")

HEARTBEAT_PATH = "/watcher/heartbeat"
# Answers that will not change on a retry: the request itself is wrong for this listener. (401 and
# 403 are retried: a renewed certificate, re-read from the files, can fix them.)
PERMANENT_STATUSES = frozenset({400, 404, 405, 410, 413, 422})
# Answers whose Retry-After says when the listener expects to take the request again.
RETRY_AFTER_STATUSES = frozenset({429, 503})


def backoff_delay(
    failures: int, initial: float, maximum: float, rand: Callable[[], float] = random.random
) -> float:
    """Delay before the next attempt after ``failures`` consecutive failures ("equal jitter").

    The cap doubles per failure; the delay is uniformly drawn from [cap/2, cap], so retries from
    many runtimes spread out while every step still waits at least half of the nominal backoff.
    """
    if failures <= 0:
        return 0.0
    cap = min(maximum, initial * (2 ** min(failures - 1, 60)))
    return cap * (0.5 + 0.5 * rand())


def asked_delay(retry_after: float, maximum: float, rand: Callable[[], float] = random.random) -> float:
    """Delay before the next attempt when the listener said ``Retry-After``: at least that, spread
    up to half again so that many runtimes do not all come back in the same instant, and never
    beyond ``maximum``."""
    return min(maximum, retry_after * (1 + 0.5 * rand()))


def rfc3339(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


class Sender:
    """Owns the queue consumer thread and the :class:`KcpClient`."""

    def __init__(
        self,
        queue: SendQueue,
        client: KcpClient,
        metrics: WatcherMetrics,
        *,
        contract: str,
        heartbeat_interval: float,
        backoff_initial: float,
        backoff_max: float,
        version: str,
    ) -> None:
        self.queue = queue
        self._client = client
        self._metrics = metrics
        self._contract = contract
        self._heartbeat_interval = heartbeat_interval
        self._backoff = (backoff_initial, backoff_max)
        self._version = version
        self.started_at = dt.datetime.now(dt.UTC)
        self._failures = 0
        self._resume_at = 0.0
        self._next_heartbeat = time.monotonic()
        self._heartbeat_404_logged = False
        self._stop = threading.Event()
        self._deadline = float("inf")
        self._thread = threading.Thread(target=self._run, name="watcher-sender", daemon=True)
        self._lock = threading.Lock()
        self.sent = self.failed = self.dropped = 0
        metrics.queue_capacity.set(queue.capacity)
        # Read at scrape time: always exact, no racing updates from admission and sender threads.
        metrics.queue_depth.set_function(lambda: len(queue))

    # --- producer side (admission threads) ---

    def submit(self, item: QueuedEvent) -> OfferResult:
        """Hand an event over for delivery; never blocks on the network."""
        result = self.queue.offer(item)
        if result is OfferResult.QUEUED:
            self._metrics.events_queued.inc()
        elif result is OfferResult.COALESCED:
            self._metrics.events_coalesced.inc()
        else:
            self._count_dropped("queue-full", 1)
        return result

    def _count_dropped(self, reason: str, count: int) -> None:
        with self._lock:
            self.dropped += count
        self._metrics.events_dropped.labels(reason=reason).inc(count)

    # --- lifecycle ---

    def start(self) -> None:
        self._thread.start()

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def stop(self, flush_timeout: float) -> int:
        """Stop after flushing for at most ``flush_timeout`` seconds; returns events dropped."""
        self._deadline = time.monotonic() + flush_timeout
        self._stop.set()
        self.queue.wake()
        if self._thread.is_alive():
            # An attempt started just before the deadline may run for up to the client timeout.
            self._thread.join(flush_timeout + self._client.timeout + 1.0)
        leftover = self.queue.drain()
        if leftover:
            self._count_dropped("shutdown", len(leftover))
            log_event(logger, logging.WARNING, "events not delivered before shutdown", dropped=len(leftover))
        self._client.close()
        return len(leftover)

    # --- the loop ---

    def _run(self) -> None:
        while True:
            now = time.monotonic()
            if self._stop.is_set() and (len(self.queue) == 0 or now >= self._deadline):
                return
            if now < self._resume_at:  # backing off: only a stop request cuts the pause short
                pause = min(self._resume_at, self._deadline) - now
                if self._stop.is_set():
                    time.sleep(max(0.0, pause))  # flushing: keep backing off until the deadline
                else:
                    self._stop.wait(pause)
                continue
            if self._heartbeat_due(now):
                self._send_heartbeat()
                continue
            entry = self.queue.take(self._wait_time(now))
            if entry is not None:
                self._deliver(entry)

    def _wait_time(self, now: float) -> float | None:
        waits = []
        if self._heartbeat_interval > 0 and not self._stop.is_set():
            waits.append(self._next_heartbeat - now)
        if self._stop.is_set():
            waits.append(self._deadline - now)
        return max(0.0, min(waits)) if waits else None

    def _heartbeat_due(self, now: float) -> bool:
        if self._heartbeat_interval <= 0 or self._stop.is_set() or now < self._next_heartbeat:
            return False
        overdue = now >= self._next_heartbeat + self._heartbeat_interval
        return overdue or not self.queue.has_ready()

    def _deliver(self, entry: Entry) -> None:
        item = entry.item
        path = f"/{self._contract}/{item.component}/event"
        self._metrics.kcp_requests.inc()
        try:
            response = timed_post(self._client, self._metrics, "event", path, item.event.to_json())
        except KcpError as exc:
            self._failed(entry, exc.reason, REASON_FAILED_REQUEST, exc.detail)
            return
        if response.status in PERMANENT_STATUSES:
            self._rejected(entry, response.status, response.body[:200].decode("utf-8", "replace"))
            return
        if response.status != 200:
            detail = f"status {response.status}: {response.body[:200].decode('utf-8', 'replace')}"
            asked = response.retry_after if response.status in RETRY_AFTER_STATUSES else None
            self._failed(entry, f"http-{response.status}", REASON_FAILED_REQUEST, detail, retry_after=asked)
            return
        self.queue.complete(entry, delivered=True)
        with self._lock:
            self.sent += 1
        self._metrics.events_sent.inc()
        if self._failures:
            log_event(logger, logging.INFO, "kcp delivery recovered", after_failures=self._failures)
        self._failures = 0
        log_event(
            logger,
            logging.DEBUG,
            "event delivered",
            component=item.component,
            namespace=item.event.namespace,
            name=item.event.name,
            attempts=entry.attempts,
        )

    def _rejected(self, entry: Entry, status: int, detail: str) -> None:
        """The listener answered that this event can never be accepted (e.g. 404: no such
        component): retrying it would only block the queue, so it is dropped, counted and logged.
        The listener itself is healthy, so sending goes on without a backoff."""
        self.queue.complete(entry, delivered=True)
        self._count_dropped(f"rejected-{status}", 1)
        self._metrics.failed_kcp.labels(error_reason=REASON_FAILED_REQUEST).inc()
        log_event(
            logger,
            logging.ERROR,
            "kcp rejected the event; dropped",
            status=status,
            detail=detail,
            component=entry.item.component,
            namespace=entry.item.event.namespace,
            name=entry.item.event.name,
        )

    def _failed(
        self,
        entry: Entry,
        reason: str,
        upstream_reason: str,
        detail: str,
        *,
        retry_after: float | None = None,
    ) -> None:
        self.queue.complete(entry, delivered=False)
        with self._lock:
            self.failed += 1
        self._metrics.events_failed.labels(reason=reason).inc()
        self._metrics.failed_kcp.labels(error_reason=upstream_reason).inc()
        self._failures += 1
        delay = (
            backoff_delay(self._failures, *self._backoff)
            if retry_after is None
            else asked_delay(retry_after, self._backoff[1])
        )
        self._resume_at = time.monotonic() + delay
        log_event(
            logger,
            logging.WARNING,
            "kcp request failed; will retry",
            reason=reason,
            detail=detail,
            component=entry.item.component,
            namespace=entry.item.event.namespace,
            name=entry.item.event.name,
            attempts=entry.attempts,
            retry_in=round(delay, 3),
            queue_depth=len(self.queue),
        )

    def heartbeat_body(self) -> bytes:
        with self._lock:
            sent, failed, dropped = self.sent, self.failed, self.dropped
        body = {
            "watcherVersion": self._version,
            "startedAt": rfc3339(self.started_at),
            "queueDepth": len(self.queue),
            "eventsSent": sent,
            "eventsFailed": failed,
            "eventsDropped": dropped,
        }
        return json.dumps(body, separators=(",", ":")).encode()

    def _send_heartbeat(self) -> None:
        self._next_heartbeat = time.monotonic() + self._heartbeat_interval
        try:
            response = timed_post(
                self._client, self._metrics, "heartbeat", HEARTBEAT_PATH, self.heartbeat_body()
            )
        except KcpError as exc:
            self._metrics.heartbeats.labels(result="failed").inc()
            log_event(logger, logging.WARNING, "heartbeat failed", reason=exc.reason, detail=exc.detail)
            return
        if 200 <= response.status < 300:
            self._metrics.heartbeats.labels(result="success").inc()
        elif response.status == 404:
            self._metrics.heartbeats.labels(result="unsupported").inc()
            if not self._heartbeat_404_logged:
                self._heartbeat_404_logged = True
                log_event(
                    logger,
                    logging.INFO,
                    "kcp listener has no heartbeat endpoint (404); continuing without heartbeats being seen",
                    path=HEARTBEAT_PATH,
                )
        else:
            self._metrics.heartbeats.labels(result="failed").inc()
            log_event(logger, logging.WARNING, "heartbeat failed", reason=f"http-{response.status}")
