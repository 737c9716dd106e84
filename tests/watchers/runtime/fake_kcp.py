"""A fake KCP listener: a real ``ssl`` HTTPS server that requires client certificates.

It records every request (path, headers, body, client certificate CN, connection number) and can
be told to fail (500), to close connections without answering, or to be down (connection refused),
and to recover, so the watcher's delivery is tested against real sockets and real TLS.
"""

from __future__ import annotations

import contextlib
import json
import socket
import ssl
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from pki.crypto import KeyPair, certificate_to_pem, private_key_to_pem
from tests.watchers.runtime.support import wait_until


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    client_cn: str
    connection: int
    at: float = field(default_factory=time.monotonic)

    @property
    def json(self) -> Any:
        return json.loads(self.body)


class _ListenerHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server: _ListenerServer

    def setup(self) -> None:
        super().setup()
        self.server.owner._track(self.connection)

    def handle(self) -> None:
        owner = self.server.owner
        try:
            self.connection.do_handshake()
            cert = self.connection.getpeercert() or {}
        except (ssl.SSLError, OSError):
            with owner.lock:
                owner.handshake_failures += 1
            return
        subject = dict(item for rdn in cert.get("subject", ()) for item in rdn)
        self.client_cn = subject.get("commonName", "")
        with owner.lock:
            owner.connections += 1
            self.connection_id = owner.connections
        with contextlib.suppress(ssl.SSLError, OSError):
            super().handle()

    def do_POST(self) -> None:
        owner = self.server.owner
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        record = Recorded(
            "POST", self.path, dict(self.headers.items()), body, self.client_cn, self.connection_id
        )
        status = owner._answer(record)
        if status is None:  # "close": drop the connection without answering
            self.close_connection = True
            return
        payload = b"ok" if status == 200 else f"status {status}".encode()
        self.send_response(status)
        if status in (429, 503) and owner.retry_after is not None:
            self.send_header("Retry-After", owner.retry_after)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _ListenerServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], owner: FakeListener) -> None:
        self.owner = owner
        super().__init__(address, _ListenerHandler)

    def get_request(self) -> tuple[socket.socket, Any]:
        sock, addr = self.socket.accept()
        return self.owner.context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False), addr


class FakeListener:
    """A KCP listener stand-in: records requests; can fail (500), close, be down, and recover."""

    def __init__(self, directory: Path, server_pair: KeyPair, client_ca_pem: bytes) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        cert, key = directory / "listener.crt", directory / "listener.key"
        cert.write_bytes(certificate_to_pem(server_pair.certificate))
        key.write_bytes(private_key_to_pem(server_pair.private_key))
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(cert, key)
        self.context.verify_mode = ssl.CERT_REQUIRED
        self.context.load_verify_locations(cadata=client_ca_pem.decode())
        self.lock = threading.Lock()
        self.requests: list[Recorded] = []
        self.connections = 0
        self.handshake_failures = 0
        self.mode = "ok"  # ok | fail | close
        self.fail_next_events = 0
        self.event_status = 200
        self.retry_after: str | None = None  # sent with a 503 or 429
        self.heartbeat_status = 200
        self.port = 0
        self._server: _ListenerServer | None = None
        self._sockets: set[socket.socket] = set()

    def _track(self, sock: socket.socket) -> None:
        with self.lock:
            self._sockets.add(sock)

    def _answer(self, record: Recorded) -> int | None:
        with self.lock:
            self.requests.append(record)
            if self.mode == "close":
                return None
            if self.mode == "fail":
                return 500
            if record.path == "/watcher/heartbeat":
                return self.heartbeat_status
            if self.fail_next_events > 0:
                self.fail_next_events -= 1
                return 500
            return self.event_status

    def start(self) -> FakeListener:
        self._server = _ListenerServer(("127.0.0.1", self.port), self)
        self.port = self._server.server_address[1]
        threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()
        return self

    def down(self) -> None:
        """Stop listening and cut every open connection (connection refused from now on)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        with self.lock:
            sockets, self._sockets = list(self._sockets), set()
        for sock in sockets:
            with contextlib.suppress(OSError):
                socket.socket.shutdown(sock, socket.SHUT_RDWR)

    def up(self) -> None:
        self.start()

    @property
    def addr(self) -> str:
        return f"localhost:{self.port}"

    def of_path(self, suffix: str) -> list[Recorded]:
        with self.lock:
            return [r for r in self.requests if r.path.endswith(suffix)]

    def events(self) -> list[Recorded]:
        return self.of_path("/event")

    def heartbeats(self) -> list[Recorded]:
        return self.of_path("/watcher/heartbeat")

    def event_names(self) -> list[str]:
        return [r.json["watched"]["Name"] for r in self.events()]

    def wait_for_event(self, name: str, timeout: float = 5.0) -> Recorded:
        return wait_until(
            lambda: next((r for r in self.events() if r.json["watched"]["Name"] == name), None), timeout
        )
