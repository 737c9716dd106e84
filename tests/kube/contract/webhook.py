"""A TLS admission webhook in the test process, as a webhook pod would serve it.

It answers ``POST <any path>`` with an AdmissionReview whose ``response`` comes from ``decide``
(the request's ``uid`` is added), keeps every review it received, and can answer late
(``delay``) to make the API server's call time out. Its certificate is issued for the Service
name the API server verifies (``<service>.<namespace>.svc``).
"""

from __future__ import annotations

import datetime as dt
import json
import ssl
import tempfile
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from pki.crypto import KeyPair, create_ca, issue_certificate

Decision = Callable[[dict[str, Any]], dict[str, Any]]


def allow(request: dict[str, Any]) -> dict[str, Any]:
    return {"allowed": True}


def webhook_ca() -> KeyPair:
    now = dt.datetime.now(dt.UTC)
    return create_ca(common_name="contract-webhook-ca", now=now, validity=dt.timedelta(days=1))


class WebhookServer:
    """See the module docstring; ``with WebhookServer(...) as server:`` serves until the end."""

    def __init__(self, *, ca: KeyPair, service: str, namespace: str, address: str) -> None:
        self.ca = ca
        self.address = address
        self.reviews: list[dict[str, Any]] = []
        self.decide: Decision = allow
        self.delay = 0.0
        now = dt.datetime.now(dt.UTC)
        host = f"{service}.{namespace}.svc"
        pair = issue_certificate(
            ca=ca, common_name=host, dns_names=[host], now=now, validity=dt.timedelta(hours=2), client=False
        )
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        with tempfile.TemporaryDirectory() as tmp:
            cert, key = Path(tmp, "tls.crt"), Path(tmp, "tls.key")
            cert.write_bytes(pair.certificate_pem + ca.certificate_pem)
            key.write_bytes(pair.private_key_pem)
            context.load_cert_chain(cert, key)
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                review = json.loads(body)
                review["path"] = self.path
                server.reviews.append(review)
                if server.delay:
                    time.sleep(server.delay)
                response = {"uid": review["request"]["uid"], **server.decide(review["request"])}
                answer = json.dumps(
                    {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}
                ).encode()
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(answer)))
                    self.end_headers()
                    self.wfile.write(answer)
                except OSError:
                    pass  # the API server gave up waiting (a timeout case)

            def log_message(self, *args: object) -> None:
                pass

        self._httpd = ThreadingHTTPServer((address, 0), Handler)
        self.port = self._httpd.server_address[1]
        self._httpd.daemon_threads = True
        self._httpd.socket = context.wrap_socket(self._httpd.socket, server_side=True)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, name="contract-webhook", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)

    def __enter__(self) -> WebhookServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def requests(self, path: str | None = None) -> list[dict[str, Any]]:
        """The AdmissionReview requests received (at ``path``), oldest first."""
        return [r["request"] for r in self.reviews if path is None or r["path"].split("?")[0] == path]
