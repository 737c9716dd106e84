"""Prometheus metrics of the runtime watcher, on a registry of its own.

Upstream names are kept where upstream has them so existing dashboards and the upstream e2e
checks keep working (``watcher_admission_request_total``, ``watcher_admission_request_error_total``,
``watcher_kcp_requests_total``, ``watcher_failed_kcp_total{error_reason}``, ``watcher_request_duration``,
``watcher_fips_mode``: 0 off, 1 on, 2 only, see ``fips.py``).
Because delivery is asynchronous here, the KCP counters count HTTP attempts made by the sender,
not admissions. A private registry keeps several in-process watchers (tests) from colliding and
keeps the default process/GC collectors out of the way.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from watchers.runtime.fips import fips_mode

# Upstream error_reason values (watchermetrics.KcpErrReason), reused where they fit. "request-setup"
# (client certificate unloadable) stays at 0 here: bad files stop the start, and a broken update
# keeps the previous certificate. "missing-address-or-contract" cannot happen (validated at start).
REASON_SUBRESOURCE = "invalid-subresource"
REASON_REQUEST_SETUP = "request-setup"
REASON_FAILED_REQUEST = "failed-request"

ADMISSION_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
KCP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class WatcherMetrics:
    """All metrics of one watcher instance; attributes are the prometheus_client objects."""

    def __init__(self, registry: CollectorRegistry | None = None, *, version: str = "") -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        r = self.registry
        # --- upstream names ---
        self.admission_requests = Counter(
            "watcher_admission_request_total", "Incoming admission requests on /validate/", registry=r
        )
        self.admission_errors = Counter(
            "watcher_admission_request_error_total",
            "Admission requests rejected as malformed (answered 4xx)",
            registry=r,
        )
        self.kcp_requests = Counter(
            "watcher_kcp_requests_total",
            "WatchEvent POST attempts to the KCP listener (retries included)",
            registry=r,
        )
        self.failed_kcp = Counter(
            "watcher_failed_kcp_total",
            "Failed WatchEvent deliveries by upstream error reason (per attempt)",
            ["error_reason"],
            registry=r,
        )
        self.request_duration = Gauge(
            "watcher_request_duration", "Handling time of the last admission request in seconds", registry=r
        )
        self.fips_mode = Gauge(
            "watcher_fips_mode", "FIPS mode of the OpenSSL behind TLS (0=off/1=on/2=only)", registry=r
        )
        self.fips_mode.set(fips_mode())
        # --- ours ---
        self.admission_in_flight = Gauge(
            "watcher_admission_in_flight", "Admission requests being handled right now", registry=r
        )
        self.admission_latency = Histogram(
            "watcher_admission_duration_seconds",
            "Admission request handling time (body read to response written)",
            ["code"],
            buckets=ADMISSION_BUCKETS,
            registry=r,
        )
        self.events_queued = Counter(
            "watcher_events_queued_total",
            "WatchEvents accepted into the send queue as new entries",
            registry=r,
        )
        self.events_coalesced = Counter(
            "watcher_events_coalesced_total",
            "WatchEvents merged into an identical pending event instead of queued twice",
            registry=r,
        )
        self.events_sent = Counter(
            "watcher_events_sent_total", "WatchEvents the listener answered with 200", registry=r
        )
        self.events_failed = Counter(
            "watcher_events_failed_total",
            "Failed WatchEvent delivery attempts (the event stays queued and is retried)",
            ["reason"],
            registry=r,
        )
        self.events_dropped = Counter(
            "watcher_events_dropped_total", "WatchEvents given up on, by reason", ["reason"], registry=r
        )
        self.queue_depth = Gauge(
            "watcher_send_queue_depth",
            "WatchEvents waiting for delivery (including the one in flight)",
            registry=r,
        )
        self.queue_capacity = Gauge("watcher_send_queue_capacity", "Size limit of the send queue", registry=r)
        self.kcp_latency = Histogram(
            "watcher_kcp_request_duration_seconds",
            "Duration of requests to the KCP listener (connection set-up included)",
            ["endpoint"],
            buckets=KCP_BUCKETS,
            registry=r,
        )
        self.kcp_connections = Counter(
            "watcher_kcp_connections_total", "TLS connections opened to the KCP listener", registry=r
        )
        self.kcp_connected = Gauge(
            "watcher_kcp_connected", "1 while a pooled connection to the KCP listener is open", registry=r
        )
        self.heartbeats = Counter(
            "watcher_heartbeats_total",
            "Heartbeats by result (success, failed, unsupported)",
            ["result"],
            registry=r,
        )
        self.tls_reloads = Counter(
            "watcher_tls_reloads_total",
            "Reloads of changed certificate files by result",
            ["result"],
            registry=r,
        )
        self.tls_handshake_errors = Counter(
            "watcher_tls_handshake_errors_total", "Failed TLS handshakes on the webhook port", registry=r
        )
        self.build_info = Gauge(
            "watcher_build_info", "Always 1; the label carries the version", ["version"], registry=r
        )
        self.build_info.labels(version=version).set(1)
        # Known label values start at 0 so dashboards and rate() see the series before the first event.
        for reason in (REASON_SUBRESOURCE, REASON_REQUEST_SETUP, REASON_FAILED_REQUEST):
            self.failed_kcp.labels(error_reason=reason)
        for reason in ("connect", "tls", "timeout", "connection-lost"):
            self.events_failed.labels(reason=reason)
        for reason in ("queue-full", "shutdown"):
            self.events_dropped.labels(reason=reason)
        for result in ("success", "failed", "unsupported"):
            self.heartbeats.labels(result=result)
        for result in ("success", "error"):
            self.tls_reloads.labels(result=result)

    def value(self, name: str, **labels: str) -> float:
        """Current value of one sample (0 when it has not been created yet), for logs and tests."""
        found = self.registry.get_sample_value(name, labels)
        return 0.0 if found is None else found
