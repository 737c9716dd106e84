"""Real TLS handshakes with certificates from our PKI: what the listener accepts and rejects,
before and during a CA rotation."""

from __future__ import annotations

import datetime as dt
import socket
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.utils import timezone

from pki import crypto, selectors, services
from tests.factories import KymaFactory

pytestmark = pytest.mark.django_db


class MutualTLSServer:
    """A one-thread TLS server requiring client certificates; it records each peer's CN."""

    def __init__(self, context: ssl.SSLContext) -> None:
        self.context = context
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.peers: list[str] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                raw, _ = self.sock.accept()
            except OSError:
                return
            try:
                with self.context.wrap_socket(raw, server_side=True) as conn:
                    subject = dict(item for part in conn.getpeercert()["subject"] for item in part)
                    self.peers.append(subject["commonName"])
                    conn.sendall(b"hello " + subject["commonName"].encode())
            except (ssl.SSLError, OSError):
                raw.close()

    def close(self) -> None:
        self.sock.close()


def write(tmp: Path, name: str, data: bytes) -> str:
    path = tmp / name
    path.write_bytes(data)
    return str(path)


def listener_context(tmp: Path) -> ssl.SSLContext:
    cert = services.listener_certificate()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(
        write(tmp, "srv.crt", cert.certificate_pem.encode()),
        write(tmp, "srv.key", cert.private_key.reveal_bytes()),
    )
    context.load_verify_locations(cadata=selectors.ca_bundle_pem().decode())
    context.verify_mode = ssl.CERT_REQUIRED
    return context


def handshake(port: int, tmp: Path, *, cert_pem: bytes, key_pem: bytes, trusted_pem: bytes) -> str:
    """Connect like a runtime watcher: its own certificate, its own (possibly older) bundle."""
    context = ssl.create_default_context(cadata=trusted_pem.decode())
    context.load_cert_chain(write(tmp, "c.crt", cert_pem), write(tmp, "c.key", key_pem))
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname="localhost") as conn,
    ):
        return conn.recv(100).decode()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[MutualTLSServer]:
    services.ca_bootstrap()
    srv = MutualTLSServer(listener_context(tmp_path))
    yield srv
    srv.close()


def test_given_a_fresh_runtime_certificate_when_connecting_then_accepted(server, tmp_path):
    kyma = KymaFactory(runtime_id="rt-fresh")
    data = services.runtime_secret_data(services.certificate_for_kyma(kyma=kyma))
    reply = handshake(
        server.port, tmp_path, cert_pem=data["tls.crt"], key_pem=data["tls.key"], trusted_pem=data["ca.crt"]
    )
    assert reply == "hello rt-fresh"


def test_given_a_foreign_ca_certificate_when_connecting_then_the_handshake_fails(server, tmp_path):
    now = timezone.now()
    foreign = crypto.create_ca(common_name="foreign", now=now, validity=dt.timedelta(days=1))
    pair = crypto.issue_certificate(
        ca=foreign,
        common_name="intruder",
        dns_names=["x.example.com"],
        now=now,
        validity=dt.timedelta(hours=1),
    )
    try:
        # TLS 1.3 reports a rejected client certificate at the client's first read.
        reply = handshake(
            server.port,
            tmp_path,
            cert_pem=pair.certificate_pem,
            key_pem=pair.private_key_pem,
            trusted_pem=selectors.ca_bundle_pem(),
        )
    except (ssl.SSLError, ConnectionResetError, BrokenPipeError) as exc:
        reply = f"rejected: {exc}"
    assert reply.startswith("rejected") or reply == ""
    assert "intruder" not in server.peers


def test_given_a_rotation_when_in_the_grace_period_then_old_and_new_clients_both_connect(tmp_path):
    services.ca_bootstrap()
    old_kyma, new_kyma = KymaFactory(runtime_id="rt-old"), KymaFactory(runtime_id="rt-new")
    old_data = services.runtime_secret_data(services.certificate_for_kyma(kyma=old_kyma))
    services.ca_rotate()
    new_data = services.runtime_secret_data(services.certificate_for_kyma(kyma=new_kyma))
    assert new_data["ca.crt"].count(b"BEGIN CERTIFICATE") == 2

    srv = MutualTLSServer(listener_context(tmp_path))  # serving from the old CA, trusting both
    try:
        # The runtime not re-issued yet still has only the old CA in its bundle.
        old_reply = handshake(
            srv.port,
            tmp_path,
            cert_pem=old_data["tls.crt"],
            key_pem=old_data["tls.key"],
            trusted_pem=old_data["ca.crt"],
        )
        new_reply = handshake(
            srv.port,
            tmp_path,
            cert_pem=new_data["tls.crt"],
            key_pem=new_data["tls.key"],
            trusted_pem=new_data["ca.crt"],
        )
    finally:
        srv.close()
    assert (old_reply, new_reply) == ("hello rt-old", "hello rt-new")


def test_given_no_grace_period_when_rotating_then_an_old_bundle_no_longer_trusts_the_listener(
    tmp_path, settings
):
    """Why the grace period exists: without it a runtime with the old bundle is cut off."""
    settings.PKI_CA_GRACE_DAYS = 0
    services.ca_bootstrap()
    old_data = services.runtime_secret_data(services.certificate_for_kyma(kyma=KymaFactory()))
    services.ca_rotate()
    srv = MutualTLSServer(listener_context(tmp_path))
    try:
        with pytest.raises(ssl.SSLCertVerificationError):
            handshake(
                srv.port,
                tmp_path,
                cert_pem=old_data["tls.crt"],
                key_pem=old_data["tls.key"],
                trusted_pem=old_data["ca.crt"],
            )
    finally:
        srv.close()
