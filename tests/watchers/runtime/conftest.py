"""Fixtures: one PKI per session; per test a fake listener, certificate files and watchers.

Default wiring (also the multi-CA case): CA_CERT holds the old and the new CA, the runtime
certificate comes from the old CA and the listener's server certificate from the new one, so every
delivery proves the watcher trusts a bundle with several CAs.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pki.crypto import certificate_to_pem
from tests.watchers.runtime.fake_kcp import FakeListener
from tests.watchers.runtime.support import Pki, TlsFiles, WebhookClient, make_pki
from watchers.runtime import Config, WatcherServer

FAST = {
    "webhook_port": 0,
    "metrics_port": 0,
    "bind_address": "127.0.0.1",
    "heartbeat_interval": 0,
    "backoff_initial": 0.05,
    "backoff_max": 0.4,
    "cert_reload_interval": 0.05,
    "kcp_timeout": 3.0,
    "shutdown_timeout": 1.0,
}


@pytest.fixture(scope="session")
def pki() -> Pki:
    return make_pki()


@pytest.fixture
def listener(tmp_path: Path, pki: Pki) -> Iterator[FakeListener]:
    fake = FakeListener(
        tmp_path / "listener", pki.listener, certificate_to_pem(pki.ca_old.certificate)
    ).start()
    yield fake
    fake.down()


@pytest.fixture
def tls_files(tmp_path: Path, pki: Pki) -> TlsFiles:
    return TlsFiles.write(tmp_path / "watcher-tls", pki.bundle_pem, pki.runtime)


def make_config(files: TlsFiles, kcp_addr: str, **overrides: Any) -> Config:
    settings = {**FAST, **overrides}
    return Config(
        ca_cert=str(files.ca), tls_cert=str(files.cert), tls_key=str(files.key), kcp_addr=kcp_addr, **settings
    )


@pytest.fixture
def start_watcher(tls_files: TlsFiles, listener: FakeListener) -> Iterator[Callable[..., WatcherServer]]:
    """Start watchers in-process (ports 0, short timings); all are stopped after the test."""
    started: list[WatcherServer] = []

    def start(**overrides: Any) -> WatcherServer:
        files = overrides.pop("files", tls_files)
        server = WatcherServer(make_config(files, overrides.pop("kcp_addr", listener.addr), **overrides))
        server.start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop(flush_timeout=0.2)


@pytest.fixture
def watcher(start_watcher: Callable[..., WatcherServer]) -> WatcherServer:
    return start_watcher()


@pytest.fixture
def client_for(pki: Pki) -> Iterator[Callable[[WatcherServer], WebhookClient]]:
    clients: list[WebhookClient] = []

    def connect(server: WatcherServer) -> WebhookClient:
        client = WebhookClient(server.webhook_port, certificate_to_pem(pki.ca_old.certificate))
        clients.append(client)
        return client

    yield connect
    for client in clients:
        client.close()


@pytest.fixture
def webhook(watcher: WatcherServer, client_for: Callable[[WatcherServer], WebhookClient]) -> WebhookClient:
    return client_for(watcher)


def pytest_make_parametrize_id(config: pytest.Config, val: object, argname: str) -> str | None:
    """A review built by ``support.review`` carries random uids: its test id names its operation
    instead, so every xdist worker collects the same ids."""
    if isinstance(val, bytes) and val.startswith(b'{"kind": "AdmissionReview"'):
        try:
            return f"review-{json.loads(val)['request']['operation']}"
        except (ValueError, KeyError, TypeError):
            return "review"
    return None
