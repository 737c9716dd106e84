"""A plain-HTTP side port for the Celery roles (worker, beat): probes and Prometheus.

Neither role serves HTTP of its own, so each may open one (``WORKER_METRICS_BIND``,
``BEAT_METRICS_BIND``; off when empty, as in ``make run``) answering:

- ``/healthz`` (liveness): the process runs its loop. A worker answers while it is up; a beat while
  its scheduler ticked within :data:`STALLED_AFTER` seconds. Neither depends on the broker or the
  database: an outage of those is not cured by a restart, and restarting every pod during one
  would only add to it.
- ``/readyz`` (readiness): a worker when the database and the broker answer (kernel.readiness); a
  beat when its last lease round reached the database, for a leader and a standby alike (a
  standby is ready to take over: a rolling update must not wait for it to lead). The body says
  which it is, who leads and since when.
- ``/metrics``: this process's metrics; a beat adds ``controlplane_beat_leading``,
  ``controlplane_beat_leading_since_timestamp_seconds``, ``controlplane_beat_lease_term`` and
  ``controlplane_beat_sent_total``.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from http import HTTPStatus
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from celery import signals
from django.conf import settings
from prometheus_client import REGISTRY, make_wsgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import ThreadingWSGIServer
from prometheus_client.registry import Collector

from kernel.metrics import scrape_registry
from kernel.readiness import CORE_CHECKS, readiness

# A beat whose loop has not come round for this long is stuck (it wakes at least every few seconds).
STALLED_AFTER = 60.0

_state: dict[str, Any] = {"server": None, "scheduler": None, "collector": False}


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        return


def _json(start_response: Callable[..., object], status: int, body: dict) -> list[bytes]:
    start_response(f"{status} {HTTPStatus(status).phrase}", [("Content-Type", "application/json")])
    return [json.dumps(body).encode()]


def beat_status() -> tuple[bool, bool, dict]:
    """(alive, ready, body) of this beat process."""
    scheduler = _state["scheduler"]
    if scheduler is None:
        return True, False, {"status": "starting"}
    election = scheduler.election
    now = time.monotonic()
    alive = now - scheduler.last_tick < STALLED_AFTER
    reached = election.reached_database_at
    window = 3 * max(election.poll, election.seconds / 3) + 1
    ready = reached is not None and now - reached < window
    with election.lock:
        held = election.held if election.leading() else None
    body = {
        "status": "ok" if alive and ready else "unavailable",
        "role": "leader" if held else "standby",
        "holder": election.holder,
        "term": held.term if held else None,
        "leadingSince": held.acquired_at.isoformat() if held else None,
        "database": "ok" if ready else "no lease round reached the database lately",
    }
    return alive, ready, body


def app(environ: dict, start_response: Callable[..., object]) -> list[bytes]:
    path = environ.get("PATH_INFO", "")
    beat = _state["scheduler"] is not None
    if path == "/healthz":
        if beat:
            alive, _, body = beat_status()
            return _json(start_response, 200 if alive else 503, body)
        return _json(start_response, 200, {"status": "ok"})
    if path == "/readyz":
        if beat:
            _, ready, body = beat_status()
            return _json(start_response, 200 if ready else 503, body)
        status, body = readiness(CORE_CHECKS)
        return _json(start_response, status, body)
    if path == "/metrics":
        return make_wsgi_app(scrape_registry(fleet=False))(environ, start_response)
    start_response("404 Not Found", [("Content-Type", "text/plain")])
    return [b"use /metrics, /healthz or /readyz\n"]


def start(bind: str) -> WSGIServer:
    """Serve the side port on ``bind`` (HOST:PORT) in a daemon thread."""
    host, _, port = bind.rpartition(":")
    server = make_server(host or "127.0.0.1", int(port), app, ThreadingWSGIServer, handler_class=_Quiet)
    threading.Thread(target=server.serve_forever, name="side-port", daemon=True).start()
    _state["server"] = server
    return server


class BeatCollector(Collector):
    """This beat's view of the election, at scrape time."""

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        scheduler = _state["scheduler"]
        if scheduler is None:
            return
        election = scheduler.election
        with election.lock:
            held = election.held if election.leading() else None
        labels = ["holder"]
        leading = GaugeMetricFamily(
            "controlplane_beat_leading", "1 while this beat holds the lease and sends", labels=labels
        )
        leading.add_metric([election.holder], 1 if held else 0)
        yield leading
        since = GaugeMetricFamily(
            "controlplane_beat_leading_since_timestamp_seconds",
            "When this beat took the lease it holds (absent while standing by)",
            labels=labels,
        )
        term = GaugeMetricFamily(
            "controlplane_beat_lease_term",
            "The lease term this beat holds (absent while standing by)",
            labels=labels,
        )
        if held:
            since.add_metric([election.holder], held.acquired_at.timestamp())
            term.add_metric([election.holder], held.term)
        yield since
        yield term
        sent = CounterMetricFamily("controlplane_beat_sent", "Periodic tasks this beat sent", labels=labels)
        sent.add_metric([election.holder], scheduler.sent)
        yield sent


_collector = BeatCollector()


def beat_started(scheduler: Any) -> None:
    """The elected scheduler exists: serve its side port (``BEAT_METRICS_BIND``) if asked."""
    _state["scheduler"] = scheduler
    if settings.BEAT_METRICS_BIND and _state["server"] is None:
        if not _state["collector"]:
            REGISTRY.register(_collector)
            _state["collector"] = True
        start(settings.BEAT_METRICS_BIND)


def beat_stopped() -> None:
    server, _state["server"] = _state["server"], None
    if server is not None:
        server.shutdown()
        server.server_close()


@signals.worker_init.connect
def _worker_side_port(**_: Any) -> None:
    if settings.WORKER_METRICS_BIND and _state["server"] is None:
        start(settings.WORKER_METRICS_BIND)
