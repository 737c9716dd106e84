"""The HTTPS admission endpoint: ``POST /validate/<component>``.

The API server keeps webhook connections alive, so this is a thread-per-connection HTTP/1.1
server. TLS is TLS 1.3 only, like upstream. The accept loop only wraps the socket with the
*current* server context (picking up a rotated certificate for every new connection) and the
handshake runs in the connection's own thread, so one slow client cannot stall accepting.

Answers: a well-formed AdmissionReview always gets ``allowed: true`` (the watcher observes, it
never blocks), whatever the object holds or however deep it is nested (as deep as the API server
allows). Anything else gets a 4xx with a JSON ``{"detail": ...}`` naming the problem, never a
500: upstream answers an empty 200, which the API server then reports as a webhook failure with no
hint why. A body over the limit is refused (413) before it is read into memory; the rest of it is
read and thrown away (up to ``DRAIN_LIMIT``), so the client can read the answer.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import socket
import ssl
import sys
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from watchers.runtime.logs import log_event
from watchers.runtime.metrics import REASON_SUBRESOURCE, WatcherMetrics
from watchers.runtime.review import KCP_FAILED, KCP_SUCCEEDED, ReviewError, admission_response, detect_change
from watchers.runtime.review import parse_admission_review as parse_review
from watchers.runtime.sender import Sender
from watchers.runtime.sendqueue import OfferResult, QueuedEvent
from watchers.runtime.tlsfiles import TLSMaterial

logger = logging.getLogger("watchers.runtime.admission")

VALIDATE_PREFIX = "/validate/"
COMPONENT_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,251}[A-Za-z0-9])?$")
# A refused body is read and thrown away up to this many bytes, so the client (which sends its
# whole body before reading the answer) gets the 413 instead of a reset connection.
DRAIN_LIMIT = 64 * 1024 * 1024
SECURITY_HEADERS = (
    ("Strict-Transport-Security", "max-age=31536000; includeSubDomains"),
    ("Content-Security-Policy", "default-src 'self'"),
)


class BadRequest(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes
    content_type: str


class AdmissionService:
    """Review -> decision -> queue -> answer, plus the per-admission log line and metrics."""

    def __init__(self, sender: Sender, metrics: WatcherMetrics) -> None:
        self._sender = sender
        self._metrics = metrics

    def reject(self, status: int, reason: str, **fields: Any) -> Answer:
        self._metrics.admission_errors.inc()
        log_event(logger, logging.WARNING, "admission rejected", status=status, reason=reason, **fields)
        body = json.dumps({"detail": reason}, ensure_ascii=True).encode() + b"\n"
        return Answer(status, body, "application/json")

    def review(self, component: str, body: bytes) -> Answer:
        try:
            request = parse_review(body)
        except ReviewError as exc:
            return self.reject(400, str(exc), component=component)
        decision = detect_change(request)
        message, queued = decision.message, ""
        if decision.outcome == "invalid-subresource":
            self._metrics.failed_kcp.labels(error_reason=REASON_SUBRESOURCE).inc()  # as upstream
        if decision.event is not None:
            result = self._sender.submit(QueuedEvent(component, decision.event))
            queued = result.value
            if result is OfferResult.DROPPED:
                capacity = self._sender.queue.capacity
                message = f"{KCP_FAILED}: send queue full ({capacity} events pending), event dropped"
            else:
                message = KCP_SUCCEEDED
        target = decision.event
        log_event(
            logger,
            logging.INFO,
            "admission reviewed",
            message=message,
            uid=request.uid,
            component=component,
            operation=request.operation,
            gvk=str(request.kind),
            sub_resource=request.sub_resource,
            namespace=target.namespace if target else request.namespace,
            name=target.name if target else request.name,
            outcome=decision.outcome,
            queued=queued,
        )
        return Answer(200, admission_response(request, message), "application/json")


def _read_chunked(rfile: Any, limit: int) -> bytes:
    body = bytearray()
    while True:
        line = rfile.readline(1026)
        try:
            size = int(line.split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise BadRequest(400, "malformed chunked encoding") from None
        if size == 0:
            while rfile.readline(1026).strip():  # trailers
                pass
            return bytes(body)
        if len(body) + size > limit:
            _drain_chunked(rfile, size)
            raise BadRequest(413, f"request body larger than {limit} bytes")
        chunk = rfile.read(size)
        if len(chunk) != size:
            raise BadRequest(400, "request body ended early")
        body += chunk
        rfile.readline(3)


def _drain(rfile: Any, length: int) -> None:
    """Read and drop ``length`` bytes (at most ``DRAIN_LIMIT``), never holding them."""
    left = min(length, DRAIN_LIMIT)
    while left > 0:
        chunk = rfile.read(min(left, 65536))
        if not chunk:
            return
        left -= len(chunk)


def _drain_chunked(rfile: Any, size: int) -> None:
    """Drop the rest of a chunked body whose current chunk has ``size`` bytes (-1: before the
    first chunk's size line)."""
    dropped = 0
    while size and dropped < DRAIN_LIMIT:
        if size > 0:
            _drain(rfile, size)
            dropped += size
            rfile.readline(3)
        try:
            size = int(rfile.readline(1026).split(b";", 1)[0].strip(), 16)
        except ValueError:
            return


class AdmissionHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "runtime-watcher"
    sys_version = ""
    disable_nagle_algorithm = True
    server: WebhookServer

    def setup(self) -> None:
        self.timeout = self.server.idle_timeout
        super().setup()
        self.server.track(self.connection)

    def finish(self) -> None:
        try:
            super().finish()
        except OSError:
            pass
        finally:
            self.server.untrack(self.connection)

    def handle(self) -> None:
        try:
            self.connection.do_handshake()
        except (ssl.SSLError, OSError) as exc:
            self.server.metrics.tls_handshake_errors.inc()
            log_event(
                logger, logging.DEBUG, "tls handshake failed", peer=self.client_address[0], error=str(exc)
            )
            return
        try:
            super().handle()
        except (ssl.SSLError, OSError) as exc:
            log_event(logger, logging.DEBUG, "connection error", peer=self.client_address[0], error=str(exc))

    def __getattr__(self, name: str) -> Any:
        # Every method but POST gets 405 (BaseHTTPRequestHandler would answer 501 for unknown ones).
        if name.startswith("do_"):
            return self._method_not_allowed
        raise AttributeError(name)

    def _method_not_allowed(self) -> None:
        def refuse() -> Answer:
            raise BadRequest(405, f"method {self.command} not allowed; use POST")

        self._serve(refuse)

    def do_POST(self) -> None:
        self._serve(self._review)

    def _review(self) -> Answer:
        path = urlsplit(self.path).path
        if not path.startswith(VALIDATE_PREFIX):
            raise BadRequest(404, f"unknown path {path!r}; expected /validate/<component>")
        component = path[len(VALIDATE_PREFIX) :]
        if not component:
            raise BadRequest(400, "component name must not be empty; expected /validate/<component>")
        if not COMPONENT_RE.match(component):
            raise BadRequest(400, f"invalid component name {component!r}")
        return self.server.service.review(component, self._read_body())

    def _read_body(self) -> bytes:
        self._body_read = True
        limit = self.server.max_body
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            return _read_chunked(self.rfile, limit)
        raw = self.headers.get("Content-Length")
        if raw is None:
            raise BadRequest(411, "Content-Length or chunked Transfer-Encoding required")
        try:
            length = int(raw)
        except ValueError:
            raise BadRequest(400, f"invalid Content-Length {raw!r}") from None
        if length < 0:
            raise BadRequest(400, f"invalid Content-Length {raw!r}")
        if length > limit:
            _drain(self.rfile, length)
            raise BadRequest(413, f"request body larger than {limit} bytes")
        body = self.rfile.read(length)
        if len(body) != length:
            raise BadRequest(400, "request body ended early")
        return body

    def _discard_body(self) -> None:
        """Read and drop a body nobody will look at (bounded), so the answer reaches the client."""
        with contextlib.suppress(OSError, ValueError, ssl.SSLError):
            if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
                _drain_chunked(self.rfile, -1)
                return
            raw = self.headers.get("Content-Length") or "0"
            if raw.isdigit():
                _drain(self.rfile, int(raw))

    def _serve(self, produce: Any) -> None:
        self._body_read = False
        metrics = self.server.metrics
        metrics.admission_requests.inc()
        self.server.request_started()
        started = time.perf_counter()
        status = 0
        try:
            try:
                answer = produce()
            except BadRequest as exc:
                self.close_connection = True  # the body may be unread: do not reuse the stream
                if not getattr(self, "_body_read", False):
                    self._discard_body()  # refused before reading it (path, method): let the client read on
                answer = self.server.service.reject(exc.status, exc.reason, path=self.path)
            except Exception as exc:  # a bug must not become a 500 or kill the connection thread
                logger.exception("admission handling failed")
                self.close_connection = True
                answer = self.server.service.reject(400, f"could not process request: {type(exc).__name__}")
            status = answer.status
            self._write(answer)
        finally:
            elapsed = time.perf_counter() - started
            self.server.request_finished()
            metrics.request_duration.set(elapsed)
            metrics.admission_latency.labels(code=str(status)).observe(elapsed)

    def _write(self, answer: Answer) -> None:
        """Status line, headers and body in one write: one TLS record and syscall, not two."""
        if self.server.draining:
            self.close_connection = True
        reason = self.responses.get(answer.status, ("",))[0]
        head = [
            f"{self.protocol_version} {answer.status} {reason}",
            f"Server: {self.version_string()}",
            f"Date: {self.date_time_string()}",
            f"Content-Type: {answer.content_type}",
            f"Content-Length: {len(answer.body)}",
            *(f"{name}: {value}" for name, value in SECURITY_HEADERS),
        ]
        if self.close_connection:
            head.append("Connection: close")
        payload = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1")
        self.wfile.write(payload if self.command == "HEAD" else payload + answer.body)

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        pass  # AdmissionService logs one structured line per admission instead

    def log_message(self, format: str, *args: Any) -> None:
        log_event(logger, logging.DEBUG, "http: " + (format % args), peer=self.client_address[0])


class WebhookServer(ThreadingHTTPServer):
    """TLS-terminating admission server; see the module docstring for the threading model."""

    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True

    def __init__(
        self,
        address: tuple[str, int],
        tls: TLSMaterial,
        service: AdmissionService,
        metrics: WatcherMetrics,
        *,
        idle_timeout: float,
        max_body: int,
    ) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self.tls = tls
        self.service = service
        self.metrics = metrics
        self.idle_timeout = idle_timeout
        self.max_body = max_body
        self.draining = False
        self._connections: set[socket.socket] = set()
        self._conn_lock = threading.Lock()
        self._in_flight = 0
        super().__init__(address, AdmissionHandler)

    def get_request(self) -> tuple[socket.socket, Any]:
        sock, addr = self.socket.accept()
        try:
            context = self.tls.current().server
            return context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False), addr
        except Exception:
            sock.close()
            raise

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Called by socketserver inside its except block: log the cause, not a stderr traceback.
        log_event(
            logger,
            logging.WARNING,
            "webhook connection error",
            peer=str(client_address),
            error=repr(sys.exc_info()[1]),
        )

    def request_started(self) -> None:
        with self._conn_lock:
            self._in_flight += 1
        self.metrics.admission_in_flight.inc()

    def request_finished(self) -> None:
        with self._conn_lock:
            self._in_flight -= 1
        self.metrics.admission_in_flight.dec()

    @property
    def in_flight(self) -> int:
        with self._conn_lock:
            return self._in_flight

    def track(self, conn: socket.socket) -> None:
        with self._conn_lock:
            self._connections.add(conn)

    def untrack(self, conn: socket.socket) -> None:
        with self._conn_lock:
            self._connections.discard(conn)

    def close_connections(self, grace: float) -> None:
        """Wait up to ``grace`` for requests in progress, then cut idle keep-alive connections."""
        deadline = time.monotonic() + grace
        while self.in_flight > 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        with self._conn_lock:
            connections = list(self._connections)
        for conn in connections:
            with contextlib.suppress(OSError):
                socket.socket.shutdown(conn, socket.SHUT_RDWR)  # wakes the blocked reader thread
