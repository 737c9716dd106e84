"""Wiring: :class:`WatcherServer` starts and stops the webhook, metrics server and sender.

This is the in-process API the tests (and ``__main__``) use::

    server = WatcherServer(Config(..., webhook_port=0, metrics_port=0, bind_address="127.0.0.1"))
    server.start()            # raises ConfigError naming the variable on bad files or busy ports
    ... server.webhook_port, server.metrics_port ...
    server.stop()             # stop accepting, flush the queue (bounded), close everything

Ports 0 pick free ports; everything runs in daemon threads of the calling process.
"""

from __future__ import annotations

import logging
import socket
import threading
from http.server import ThreadingHTTPServer
from urllib.parse import urlsplit

from prometheus_client import MetricsHandler

from watchers.runtime.config import Config, ConfigError
from watchers.runtime.kcpclient import KcpClient
from watchers.runtime.logs import log_event
from watchers.runtime.metrics import WatcherMetrics
from watchers.runtime.sender import Sender
from watchers.runtime.sendqueue import SendQueue
from watchers.runtime.tlsfiles import TLSMaterial
from watchers.runtime.webhook import AdmissionService, WebhookServer

logger = logging.getLogger("watchers.runtime")

# socketserver notices a shutdown request only between polls; a short poll keeps SIGTERM handling
# (and the tests' many start/stop cycles) fast at the cost of a few cheap wake-ups per second.
POLL_INTERVAL = 0.05


class _MetricsHandler(MetricsHandler):
    """prometheus_client's handler for ``/metrics`` (format negotiation, gzip), probes beside it.

    HTTP/1.0 (one request per connection) because prometheus_client's answer has no Content-Length.
    """

    server_version = "runtime-watcher"
    sys_version = ""
    server: _MetricsServer

    def do_GET(self) -> None:
        path = urlsplit(self.path).path
        if path == "/metrics":
            super().do_GET()
        elif path in ("/healthz", "/readyz"):
            healthy, reason = self.server.watcher.health()
            self._send(200 if healthy else 503, (reason + "\n").encode(), "text/plain; charset=utf-8")
        else:
            self._send(404, b"not found; try /metrics or /healthz\n", "text/plain; charset=utf-8")

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class _MetricsServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], watcher: WatcherServer) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self.watcher = watcher
        super().__init__(address, _MetricsHandler.factory(watcher.metrics.registry))


class WatcherServer:
    """One runtime watcher: webhook (TLS), metrics/health (plain HTTP) and the sender thread."""

    def __init__(self, config: Config, *, metrics: WatcherMetrics | None = None) -> None:
        self.config = config
        self.metrics = metrics or WatcherMetrics(version=config.watcher_version)
        self._webhook: WebhookServer | None = None
        self._metrics_server: _MetricsServer | None = None
        self._threads: list[threading.Thread] = []
        self.sender: Sender | None = None
        self.tls: TLSMaterial | None = None
        self._stopped = threading.Event()

    # --- lifecycle ---

    def start(self) -> None:
        """Load TLS material, bind both ports, start serving; raises :class:`ConfigError`."""
        config, metrics = self.config, self.metrics
        self.tls = TLSMaterial(
            config.ca_cert,
            config.tls_cert,
            config.tls_key,
            reload_interval=config.cert_reload_interval,
            on_reload=lambda result: metrics.tls_reloads.labels(result=result).inc(),
        )
        client = KcpClient(
            config.kcp_host,
            config.kcp_port,
            self.tls,
            metrics,
            timeout=config.kcp_timeout,
            keep_alive=config.kcp_keep_alive,
            user_agent=f"kyma-runtime-watcher-py/{config.watcher_version}",
        )
        self.sender = Sender(
            SendQueue(config.send_queue_size),
            client,
            metrics,
            contract=config.kcp_contract,
            heartbeat_interval=config.heartbeat_interval,
            backoff_initial=config.backoff_initial,
            backoff_max=config.backoff_max,
            version=config.watcher_version,
        )
        address = (config.bind_address, config.webhook_port)
        try:
            self._webhook = WebhookServer(
                address,
                self.tls,
                AdmissionService(self.sender, metrics),
                metrics,
                idle_timeout=config.idle_timeout,
                max_body=config.max_request_bytes,
            )
        except OSError as exc:
            raise ConfigError(
                "WEBHOOK_PORT", f"cannot listen on {address[0]}:{address[1]}: {exc.strerror or exc}"
            ) from None
        try:
            self._metrics_server = _MetricsServer((config.bind_address, config.metrics_port), self)
        except OSError as exc:
            self._webhook.server_close()
            raise ConfigError(
                "METRICS_PORT",
                f"cannot listen on {config.bind_address}:{config.metrics_port}: {exc.strerror or exc}",
            ) from None
        for name, server in (("watcher-webhook", self._webhook), ("watcher-metrics", self._metrics_server)):
            thread = threading.Thread(
                target=server.serve_forever, kwargs={"poll_interval": POLL_INTERVAL}, name=name, daemon=True
            )
            thread.start()
            self._threads.append(thread)
        self.sender.start()
        # New connections check the files themselves; this thread makes a rotation (and a broken
        # update) visible in logs and metrics even while no connection is being opened.
        reloader = threading.Thread(target=self._watch_tls, name="watcher-tls-reload", daemon=True)
        reloader.start()
        self._threads.append(reloader)
        log_event(
            logger,
            logging.INFO,
            "runtime watcher started",
            webhook_port=self.webhook_port,
            metrics_port=self.metrics_port,
            **{k: v for k, v in config.describe().items() if k not in ("webhook_port", "metrics_port")},
        )

    def _watch_tls(self) -> None:
        assert self.tls is not None
        while not self._stopped.wait(self.config.cert_reload_interval):
            self.tls.check()

    def stop(self, flush_timeout: float | None = None) -> int:
        """Graceful stop; returns the number of events dropped because the flush timed out.

        Order matters: stop accepting admissions first (no new events), let requests in progress
        finish, then give the sender up to ``flush_timeout`` (default ``SHUTDOWN_TIMEOUT``) to empty
        the queue, and only then close the metrics server so the last state stays scrapeable.
        """
        if self._stopped.is_set():
            return 0
        self._stopped.set()
        timeout = self.config.shutdown_timeout if flush_timeout is None else flush_timeout
        if self._webhook is not None:
            self._webhook.draining = True
            self._webhook.shutdown()
            self._webhook.server_close()
            self._webhook.close_connections(grace=2.0)
        dropped = self.sender.stop(timeout) if self.sender is not None else 0
        if self._metrics_server is not None:
            self._metrics_server.shutdown()
            self._metrics_server.server_close()
        for thread in self._threads:
            thread.join(2.0)
        log_event(logger, logging.INFO, "runtime watcher stopped", dropped=dropped)
        return dropped

    def __enter__(self) -> WatcherServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- introspection ---

    @property
    def webhook_port(self) -> int:
        assert self._webhook is not None, "not started"
        return int(self._webhook.server_address[1])

    @property
    def metrics_port(self) -> int:
        assert self._metrics_server is not None, "not started"
        return int(self._metrics_server.server_address[1])

    @property
    def queue_depth(self) -> int:
        return len(self.sender.queue) if self.sender is not None else 0

    def health(self) -> tuple[bool, str]:
        """Liveness: serving and the sender thread alive. KCP reachability is deliberately not part
        of it: restarting the watcher cannot fix the control plane and would lose the queue."""
        if self._stopped.is_set():
            return False, "stopping"
        if self.sender is None or not self.sender.is_alive():
            return False, "sender thread not running"
        if not all(thread.is_alive() for thread in self._threads):
            return False, "server thread not running"
        return True, "ok"
