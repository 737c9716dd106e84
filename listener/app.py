"""The listener role's WSGI application: WatchEvents and heartbeats from runtime watchers.

Why not a Django view? This endpoint is for machines, at fleet rates: the listener must take
thousands of events per second on two cores. Django's request handling plus DRF measured at about
half of that (bench/listener.py), so the listener is a small WSGI application of its own on the
same Django models and services: no URL resolver, middleware, content negotiation or template
responses, only the checks the contract needs.

Status codes, in the order they are decided: 404 (no such endpoint), 405 (not POST), 401 (no or
untrusted client certificate), 413 (body over 16 KiB), 400 (bad contract or component in the path),
404 (no Watcher for the component), 400 (bad body), 403 (certificate not allowed for the runtime),
503 (queue or database unavailable: the watcher retries), 200 (enqueued). Every answer is JSON
with a Content-Length. Never a 500 on client input. A 503 says ``Retry-After:
LISTENER_RETRY_AFTER`` (seconds): an outage of the broker or the database is expected to be
short, and our runtime watcher then retries that soon instead of backing off for up to 30 s.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Callable, Iterable
from http import HTTPStatus
from typing import Any

from django.conf import settings
from django.db import DatabaseError, close_old_connections, connection

from kernel.dberrors import database_unavailable
from kernel.errors import ApplicationError, error_body
from kernel.outage import Outage

from . import metrics, services
from .conf import HOT
from .events import MAX_BODY, EventInvalid, parse_body, parse_event_cached
from .identity import ClientIdentity, IdentityError, client_identity

log = logging.getLogger(__name__)

EVENT_PATH = re.compile(r"^/(?P<contract>[^/]*)/(?P<component>[^/]*)/event/?$")
HEARTBEAT_PATH = re.compile(r"^/watcher/heartbeat/?$")
COMPONENT = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
REPORT_FIELDS = {
    "watcherVersion": str,
    "startedAt": str,
    "queueDepth": int,
    "eventsSent": int,
    "eventsFailed": int,
    "eventsDropped": int,
}
StartResponse = Callable[[str, list[tuple[str, str]]], Any]


class HTTPError(Exception):
    def __init__(self, status: int, detail: str, headers: Iterable[tuple[str, str]] = ()) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.headers = list(headers)


# A refused body is read on and thrown away up to this much, as Go's net/http does after a
# handler (upstream's listener) left a body unread: a client that sends its whole body before
# reading the answer then gets the 413 instead of a reset connection.
DRAIN_LIMIT = 256 * 1024


def _too_large(stream: Any) -> HTTPError:
    metrics.TOO_LARGE.inc()
    left = DRAIN_LIMIT
    while left > 0 and (chunk := stream.read(min(left, 65536))):
        left -= len(chunk)
    return HTTPError(
        413, f"Body size greater than {MAX_BODY} bytes is not allowed", [("Connection", "close")]
    )


def read_body(environ: dict[str, Any]) -> bytes:
    """The raw body, refusing more than 16 KiB whatever the Content-Length says."""
    declared = environ.get("CONTENT_LENGTH") or ""
    stream = environ["wsgi.input"]
    if declared.isdigit() and int(declared) > MAX_BODY:
        raise _too_large(stream)
    body = stream.read(MAX_BODY + 1)
    if len(body) > MAX_BODY:
        raise _too_large(stream)
    return body


def authenticate(environ: dict[str, Any]) -> ClientIdentity:
    try:
        return client_identity(environ)
    except IdentityError as exc:
        metrics.FAILED_VERIFICATION.labels(reason=exc.reason).inc()
        raise HTTPError(
            401, exc.message, [("WWW-Authenticate", 'Certificate realm="runtime-watcher"')]
        ) from exc


def accept_event(environ: dict[str, Any], contract: str, component: str) -> bytes:
    identity = authenticate(environ)
    body = read_body(environ)
    if contract not in ("v1", "v2"):
        raise EventInvalid(f"unsupported contract version {contract!r}: use v1 or v2")
    if not COMPONENT.match(component):
        raise EventInvalid(f"invalid component {component!r} in the path")
    route = services.route_for(component)  # 404 before looking at the body
    event = parse_event_cached(contract, component, body)
    accepted = services.watch_event_accept(event=event, identity=identity, route=route)
    metrics.TALLY.event(component, accepted.outcome)
    return accepted.payload()


def accept_heartbeat(environ: dict[str, Any]) -> dict[str, Any]:
    identity = authenticate(environ)
    body = read_body(environ)
    data = parse_body(body or b"{}")
    report = {
        key: value
        for key, kind in REPORT_FIELDS.items()
        if isinstance(value := data.get(key), kind) and not isinstance(value, bool)
    }
    kyma = services.heartbeat_accept(identity=identity, report=report)
    metrics.HEARTBEATS.labels(result="ok").inc()
    return {"status": "ok", "kyma": f"{kyma.namespace}/{kyma.name}"}


def route(environ: dict[str, Any]) -> tuple[str, Callable[[], dict[str, Any] | bytes]]:
    """(metrics label, handler) for the request, or an HTTPError (404, 405)."""
    path = environ.get("PATH_INFO", "")
    if match := EVENT_PATH.match(path):
        contract, component = match["contract"], match["component"]
        label = contract if contract in ("v1", "v2") else "other"
        handler = lambda: accept_event(environ, contract, component)  # noqa: E731
    elif HEARTBEAT_PATH.match(path):
        label, handler = "heartbeat", lambda: accept_heartbeat(environ)
    else:
        raise HTTPError(404, f"no such endpoint: {path}; use POST /v2/<component>/event")
    if environ.get("REQUEST_METHOD") != "POST":
        raise HTTPError(
            405, f"{environ.get('REQUEST_METHOD')} method is not allowed on this path", [("Allow", "POST")]
        )
    return label, handler


def handle(environ: dict[str, Any]) -> tuple[int, dict[str, Any] | bytes, list[tuple[str, str]], str]:
    status, body, headers, label = _answer(environ)
    if status == 503:
        headers = [*headers, ("Retry-After", f"{settings.LISTENER_RETRY_AFTER:g}")]
    return status, body, headers, label


def _answer(environ: dict[str, Any]) -> tuple[int, dict[str, Any] | bytes, list[tuple[str, str]], str]:
    label = "-"
    try:
        label, handler = route(environ)
        return 200, handler(), [], label
    except HTTPError as exc:
        return exc.status, error_body(exc.detail), exc.headers, label
    except EventInvalid as exc:
        return 400, error_body(str(exc)), [], label
    except ApplicationError as exc:
        if exc.status_code == 403:
            metrics.FAILED_VERIFICATION.labels(reason="not-allowed").inc()
        return exc.status_code, error_body(exc.message, exc.errors), [], label
    except DatabaseError as exc:
        if not database_unavailable(exc):  # a bug, not a busy database
            log.exception("unexpected database error in the listener")
            return 500, error_body("internal error"), [], label
        REQUESTS_OUTAGE.happened(exc)  # one line, then one per growing delay: not one per request
        close_old_connections()
        return 503, error_body("the control plane's database is unavailable; retry"), [], label
    except Exception:
        log.exception("unexpected error in the listener")
        return 500, error_body("internal error"), [], label


REQUESTS_OUTAGE = Outage(
    log, "listener requests", first=1.0, most=30.0, doing="answering 503 with Retry-After"
)
_LOCAL = threading.local()


def _tidy_connections() -> None:
    """What Django does around each request (drop broken or expired database connections), at
    most once a second per thread: it is not free and the listener answers thousands a second."""
    now = time.monotonic()
    if now - getattr(_LOCAL, "tidied", 0.0) > 1.0:
        _LOCAL.tidied = now
        close_old_connections()


def _give_back_connection() -> None:
    """With a pool (``DATABASE_POOL_MAX_SIZE``) the thread's connection goes back after each
    request, so the process's threads share the pool's few connections (no reconnect: the pool
    keeps them open)."""
    if HOT.DATABASE_POOLED:
        connection.close()


_STATUS_LINES = {status.value: f"{status.value} {status.phrase}" for status in HTTPStatus}


def application(environ: dict[str, Any], start_response: StartResponse) -> list[bytes]:
    started = time.perf_counter()
    metrics.TALLY.begin()
    status, label = 500, "-"
    try:
        _tidy_connections()
        status, body, headers, label = handle(environ)
        payload = body if type(body) is bytes else json.dumps(body, separators=(",", ":")).encode()
        start_response(
            _STATUS_LINES[status],
            [("Content-Type", "application/json"), ("Content-Length", str(len(payload))), *headers],
        )
    finally:
        metrics.TALLY.end(label, status, time.perf_counter() - started)
        _give_back_connection()
    return [payload]
