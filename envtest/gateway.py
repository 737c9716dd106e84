"""The Istio ingress gateway's part for WatchEvents, as a stand-in: ``python -m envtest.gateway``.

Istio's gateway cannot run here (an Envoy built by Istio, its control plane, CRDs); what the
control plane relies on it for is small, and this does that, as configured by ``deploy/istio``:

- ends the runtime watchers' **mutual TLS** on ``GATEWAY_PORT`` (8443) with the credential the
  Gateway's ``credentialName`` names, read from the files of that Secret (``CREDENTIAL_DIR``:
  ``tls.crt``, ``tls.key``, ``ca.crt``) and reloaded when they change, as Istio's SDS pushes a
  changed Secret to the gateway; a client certificate that does not chain to ``ca.crt`` fails the
  handshake;
- forwards each request to ``UPSTREAM`` (the listener's Service) with ``X-Forwarded-Client-Cert``
  set as ``forwardClientCertDetails: SANITIZE_SET`` does (whatever the client sent is dropped; the
  verified certificate in ``Cert=``, URL-encoded PEM, with ``Hash``, ``Subject``, ``URI`` and
  ``DNS``);
- retries as Istio's default route policy: 2 more attempts after a connection failure or a 503,
  25 ms apart at first (Envoy's base interval), each over a new connection;
- counts its answers by status on ``/stats`` of ``ADMIN_PORT`` (15000), as Envoy's admin does, and
  is ready on ``/ready`` once it holds a credential.

Routing by VirtualService (one upstream here) and everything else of Istio are not stood in for.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import socket
import ssl
import tempfile
import threading
import time
import urllib.parse
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization

CREDENTIAL_DIR = Path(os.environ.get("CREDENTIAL_DIR", "/etc/istio/ingressgateway-certs"))
UPSTREAM = urllib.parse.urlsplit(os.environ.get("UPSTREAM", "http://controlplane-listener:8443"))
PORT = int(os.environ.get("GATEWAY_PORT", "8443"))
ADMIN_PORT = int(os.environ.get("ADMIN_PORT", "15000"))
RETRIES = 2
RETRY_BASE = 0.025
HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "upgrade", "proxy-connection", "host"}

STATS: Counter[str] = Counter()
STATS_LOCK = threading.Lock()


def count(what: str) -> None:
    with STATS_LOCK:
        STATS[what] += 1


class Credential:
    """The server's SSL context from the Secret's files, made again when they change."""

    def __init__(self) -> None:
        self.context: ssl.SSLContext | None = None
        self._seen: tuple = ()
        self._lock = threading.Lock()

    def current(self) -> ssl.SSLContext | None:
        files = [CREDENTIAL_DIR / name for name in ("tls.crt", "tls.key", "ca.crt")]
        try:
            stamp = tuple(path.read_bytes() for path in files)
        except OSError:
            return self.context
        with self._lock:
            if stamp != self._seen:
                self.context = self._context(*stamp)
                self._seen = stamp
                count("credential_loaded")
            return self.context

    @staticmethod
    def _context(cert: bytes, key: bytes, ca: bytes) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(cadata=ca.decode())
        with (
            tempfile.NamedTemporaryFile("wb", delete=True) as chain,
            tempfile.NamedTemporaryFile("wb") as secret,
        ):
            chain.write(cert)
            chain.flush()
            secret.write(key)
            secret.flush()
            context.load_cert_chain(chain.name, secret.name)
        return context


CREDENTIAL = Credential()


def forwarded_client_cert(der: bytes) -> str:
    """The header as Istio's gateway sets it with SANITIZE_SET."""
    certificate = x509.load_der_x509_certificate(der)
    pem = certificate.public_bytes(serialization.Encoding.PEM).decode()
    try:
        sans = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        dns = sans.get_values_for_type(x509.DNSName)
    except x509.ExtensionNotFound:
        dns = []
    parts = [
        f"Hash={hashlib.sha256(der).hexdigest()}",
        f'Cert="{urllib.parse.quote(pem, safe="")}"',
        f'Subject="{certificate.subject.rfc4514_string()}"',
        "URI=",
        *(f"DNS={name}" for name in dns),
    ]
    return ";".join(parts)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        return

    def _forward(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        der = self.connection.getpeercert(binary_form=True)  # type: ignore[attr-defined]
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
        headers = {k: v for k, v in headers.items() if k.lower() != "x-forwarded-client-cert"}
        headers["X-Forwarded-Client-Cert"] = forwarded_client_cert(der)
        headers["X-Forwarded-Proto"] = "https"
        headers["Host"] = self.headers.get("Host", "")
        status, answer, answer_headers = 503, b'{"detail":"upstream connect error"}', {}
        for attempt in range(RETRIES + 1):
            if attempt:
                count("retries")
                time.sleep(RETRY_BASE * attempt)
            try:
                upstream = http.client.HTTPConnection(UPSTREAM.hostname, UPSTREAM.port or 80, timeout=30)
                upstream.request(self.command, self.path, body=body, headers=headers)
                response = upstream.getresponse()
                status, answer = response.status, response.read()
                answer_headers = {k: v for k, v in response.getheaders() if k.lower() not in HOP_BY_HOP}
                upstream.close()
            except (OSError, http.client.HTTPException):
                count("upstream_connect_failures")
                status, answer, answer_headers = 503, b'{"detail":"upstream connect error"}', {}
                continue
            if status != 503:
                break
        count(f"status_{status}")
        self.send_response(status)
        for key, value in answer_headers.items():
            if key.lower() != "content-length":
                self.send_header(key, value)
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    do_POST = do_GET = do_PUT = _forward


class GatewayServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def get_request(self) -> tuple[socket.socket, object]:
        sock, address = super().get_request()
        context = CREDENTIAL.current()
        if context is None:
            sock.close()
            raise OSError("no credential yet")
        sock.settimeout(30)
        # The handshake happens on the request's thread (its first read): a slow client holds
        # only that thread; a failed one ends up in handle_error.
        return context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False), address

    def handle_error(self, request: object, client_address: object) -> None:
        count("handshake_or_connection_failures")


class Admin(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        return

    def do_GET(self) -> None:
        if self.path == "/ready":
            ok = CREDENTIAL.current() is not None
            self.send_response(200 if ok else 503)
            body = b"LIVE\n" if ok else b"no credential\n"
        else:
            with STATS_LOCK:
                body = json.dumps(dict(STATS)).encode()
            self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def main() -> None:
    admin = ThreadingHTTPServer(("0.0.0.0", ADMIN_PORT), Admin)
    threading.Thread(target=admin.serve_forever, daemon=True).start()
    GatewayServer(("0.0.0.0", PORT), Handler).serve_forever()


if __name__ == "__main__":
    main()
