"""A plain-HTTP side port of the listener role for Prometheus and probes.

The WatchEvent port requires client certificates, which neither Prometheus nor the kubelet has,
so the gunicorn master serves ``/metrics`` (all workers' values, summed), ``/healthz`` (the master
is up) and ``/readyz`` (database, broker and TLS material usable; 503 naming what is not) here.
``/metrics`` is prometheus_client's WSGI app (format negotiation, gzip); its ``start_http_server``
is not used because it answers every path with metrics.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http import HTTPStatus
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

from kernel.metrics import scrape_registry
from kernel.readiness import readiness
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
        return make_wsgi_app(scrape_registry(fleet=False))(environ, start_response)
    start_response("404 Not Found", [("Content-Type", "text/plain")])
    return [b"use /metrics, /healthz or /readyz\n"]


def start(bind: str) -> WSGIServer:
    host, _, port = bind.rpartition(":")
    # Threaded (prometheus_client's server): a /readyz waiting on a slow database must not hold
    # up a scrape.
    server = make_server(host or "127.0.0.1", int(port), app, ThreadingWSGIServer, handler_class=_Quiet)
    threading.Thread(target=server.serve_forever, name="listener-metrics", daemon=True).start()
    return server
