"""One pooled, keep-alive mTLS connection to the control plane's listener.

Upstream builds a new ``http.Client`` (and so a new TCP + TLS handshake) for every event. Here the
sender thread owns a single ``http.client.HTTPSConnection`` and reuses it; it is reopened when the
listener closes it, when a request fails, or when the certificate files changed (new client
certificate or CA bundle). Only the sender thread uses it, so there is no locking.

A request written to a pooled connection the listener had already closed (idle timeout) fails
before any response byte arrives; that case is retried once on a fresh connection, as HTTP client
libraries do, instead of being reported as a delivery failure.
"""

from __future__ import annotations

import http.client
import logging
import socket
import ssl
import time
from dataclasses import dataclass

from watchers.runtime.logs import log_event
from watchers.runtime.metrics import WatcherMetrics
from watchers.runtime.tlsfiles import TLSMaterial

logger = logging.getLogger("watchers.runtime.kcp")

MAX_RESPONSE_BYTES = 64 * 1024
_STALE_ERRORS = (
    http.client.RemoteDisconnected,
    http.client.BadStatusLine,
    BrokenPipeError,
    ConnectionResetError,
    ConnectionAbortedError,
    ssl.SSLEOFError,
    ssl.SSLZeroReturnError,
)


class KcpError(Exception):
    """A request did not get an HTTP response; ``reason`` is a short label for metrics."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True)
class KcpResponse:
    status: int
    body: bytes
    # Seconds the listener asked the client to wait before retrying (``Retry-After`` on a 503 or
    # 429, in delta-seconds), if it said.
    retry_after: float | None = None


def retry_after_seconds(value: str | None) -> float | None:
    """A ``Retry-After`` header's delta-seconds (an HTTP date or junk: ``None``)."""
    try:
        seconds = float(value) if value is not None else None
    except ValueError:
        return None
    return seconds if seconds is not None and 0 <= seconds < float("inf") else None


def _classify(exc: BaseException) -> str:
    if isinstance(exc, (TimeoutError, socket.timeout)):
        return "timeout"
    if isinstance(exc, (ssl.SSLError, ssl.CertificateError)) and not isinstance(exc, _STALE_ERRORS):
        return "tls"
    if isinstance(exc, _STALE_ERRORS):
        return "connection-lost"
    if isinstance(exc, http.client.HTTPException):
        return "protocol"
    return "connect"


class KcpClient:
    """POSTs JSON to ``https://<host>:<port><path>`` over the pooled connection."""

    def __init__(
        self,
        host: str,
        port: int,
        tls: TLSMaterial,
        metrics: WatcherMetrics,
        *,
        timeout: float = 10.0,
        keep_alive: bool = True,
        user_agent: str = "kyma-runtime-watcher-py",
    ) -> None:
        self.host, self.port = host, port
        self._tls = tls
        self._metrics = metrics
        self._timeout = timeout
        self._keep_alive = keep_alive
        self._user_agent = user_agent
        self._conn: http.client.HTTPSConnection | None = None
        self._generation = 0
        self._requests_on_conn = 0

    @property
    def timeout(self) -> float:
        return self._timeout

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
            self._metrics.kcp_connected.set(0)

    def _connect(self) -> http.client.HTTPSConnection:
        contexts = self._tls.current()  # never raises: a broken update keeps the last good contexts
        if self._conn is not None and self._generation != contexts.generation:
            log_event(
                logger,
                logging.INFO,
                "certificate files changed; reconnecting to kcp",
                generation=contexts.generation,
            )
            self.close()
        if self._conn is not None and self._conn.sock is not None:
            return self._conn
        self.close()
        conn = http.client.HTTPSConnection(
            self.host, self.port, timeout=self._timeout, context=contexts.client
        )
        try:
            conn.connect()
        except Exception as exc:
            conn.close()
            raise KcpError(_classify(exc), str(exc) or type(exc).__name__) from None
        self._conn, self._generation, self._requests_on_conn = conn, contexts.generation, 0
        self._metrics.kcp_connections.inc()
        self._metrics.kcp_connected.set(1)
        log_event(logger, logging.DEBUG, "connected to kcp", host=self.host, port=self.port)
        return conn

    def _exchange(self, conn: http.client.HTTPSConnection, path: str, body: bytes) -> KcpResponse:
        headers = {"Content-Type": "application/json", "User-Agent": self._user_agent}
        if not self._keep_alive:
            headers["Connection"] = "close"
        self._requests_on_conn += 1
        conn.request("POST", path, body=body, headers=headers)
        response = conn.getresponse()
        data = response.read(MAX_RESPONSE_BYTES)
        # An unread (oversized) answer leaves the stream unusable; otherwise honour Connection: close.
        if not response.isclosed() or response.will_close or not self._keep_alive:
            self.close()
        return KcpResponse(response.status, data, retry_after_seconds(response.getheader("Retry-After")))

    def post(self, path: str, body: bytes) -> KcpResponse:
        """Send one request; raises :class:`KcpError` when no HTTP response was received."""
        conn = self._connect()
        reused = self._requests_on_conn > 0
        try:
            return self._exchange(conn, path, body)
        except Exception as exc:
            self.close()
            if not (reused and isinstance(exc, _STALE_ERRORS)):
                raise KcpError(_classify(exc), str(exc) or type(exc).__name__) from None
            log_event(logger, logging.DEBUG, "pooled kcp connection was closed by the peer; reconnecting")
        conn = self._connect()
        try:
            return self._exchange(conn, path, body)
        except Exception as exc:
            self.close()
            raise KcpError(_classify(exc), str(exc) or type(exc).__name__) from None


def timed_post(
    client: KcpClient, metrics: WatcherMetrics, endpoint: str, path: str, body: bytes
) -> KcpResponse:
    """:meth:`KcpClient.post` with its duration recorded in ``watcher_kcp_request_duration_seconds``."""
    started = time.perf_counter()
    try:
        return client.post(path, body)
    finally:
        metrics.kcp_latency.labels(endpoint=endpoint).observe(time.perf_counter() - started)
