"""A plain-HTTP side port of the listener role for Prometheus and probes.

The WatchEvent port requires client certificates, which neither Prometheus nor the kubelet has,
so the gunicorn master serves ``/metrics`` (all workers' values, summed), ``/healthz`` (the master
is up) and ``/readyz`` (database, broker and TLS material usable; 503 naming what is not) here.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http import HTTPStatus
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest, multiprocess

from controlplane.readiness import readiness
from listener.readiness import listener_checks


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        return


def app(environ: dict, start_response: Callable[..., object]) -> list[bytes]:
    path = environ.get("PATH_INFO", "")
    if path == "/healthz":
        start_response("200 OK", [("Content-Type", "application/json")])
        return [b'{"status": "ok"}']
    if path == "/readyz":
        status, body = readiness(listener_checks())
        start_response(f"{status} {HTTPStatus(status).phrase}", [("Content-Type", "application/json")])
        return [json.dumps(body).encode()]
    if path == "/metrics":
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        start_response("200 OK", [("Content-Type", CONTENT_TYPE_LATEST)])
        return [generate_latest(registry)]
    start_response("404 Not Found", [("Content-Type", "text/plain")])
    return [b"use /metrics, /healthz or /readyz\n"]


def start(bind: str) -> WSGIServer:
    host, _, port = bind.rpartition(":")
    server = make_server(host or "127.0.0.1", int(port), app, handler_class=_Quiet)
    threading.Thread(target=server.serve_forever, name="listener-metrics", daemon=True).start()
    return server
