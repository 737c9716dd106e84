"""Running the real listener role and talking to it like a runtime watcher does."""

from __future__ import annotations

import http.client
import json
import ssl
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleet.models import Kyma
from pki import selectors, services
from tests.support.processes import Process, free_port, process_env, wait_port
from watchers.models import Watcher

KLM_WATCHER = {
    "namespace": "kcp-system",
    "name": "klm-watcher",
    "manager": "lifecycle-manager",
    "component": "lifecycle-manager",
    "labels_to_watch": {"operator.kyma-project.io/watched-by": "kyma"},
    "resource_to_watch": {"group": "operator.kyma-project.io", "version": "*", "resource": "kymas"},
    "field": "spec",
    "service_info": {"name": "klm-events", "namespace": "kcp-system", "port": 8082},
}


def klm_watcher() -> Watcher:
    return Watcher.objects.get_or_create(component="lifecycle-manager", defaults=KLM_WATCHER)[0]


@dataclass
class Listener:
    process: Process
    port: int
    metrics_port: int

    def stop(self) -> None:
        self.process.stop()


def start_listener(*, mode: str = "direct", trusted_proxies: str = "", **env: str) -> Listener:
    port, metrics_port = free_port(), free_port()
    proc = Process(
        "listener",
        [sys.executable, "manage.py", "serve", "listener", "--bind", f"127.0.0.1:{port}"],
        process_env(
            LISTENER_MODE=mode,
            LISTENER_TRUSTED_PROXIES=trusted_proxies,
            LISTENER_METRICS_BIND=f"127.0.0.1:{metrics_port}",
            LISTENER_WORKERS="1",
            **{
                "LISTENER_CACHE_SECONDS": "0",
                "LISTENER_RECONCILE_DELAY": "0",
                "LISTENER_EVENT_MARGIN": "0",
                "LISTENER_TLS_REFRESH": "3600",
                **env,
            },
        ),
    )
    wait_port(port, proc=proc)
    wait_port(metrics_port, proc=proc)
    return Listener(proc, port, metrics_port)


@dataclass
class Credentials:
    """What a runtime watcher holds: its certificate, its key and the CA bundle."""

    cert: bytes
    key: bytes
    bundle: bytes

    @classmethod
    def for_kyma(cls, kyma: Kyma) -> Credentials:
        data = services.runtime_secret_data(services.certificate_for_kyma(kyma=kyma))
        return cls(data["tls.crt"], data["tls.key"], data["ca.crt"])

    def context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cadata=selectors.ca_bundle_pem().decode())
        directory = Path(tempfile.mkdtemp(prefix="creds-"))
        (directory / "c.crt").write_bytes(self.cert)
        (directory / "c.key").write_bytes(self.key)
        context.load_cert_chain(directory / "c.crt", directory / "c.key")
        return context


def bare_context() -> ssl.SSLContext:
    """A client that trusts the listener but shows no certificate."""
    return ssl.create_default_context(cadata=selectors.ca_bundle_pem().decode())


def event_body(name: str = "default", namespace: str = "kyma-system", **extra: Any) -> dict:
    return {
        "watched": {"Namespace": namespace, "Name": name},
        "watchedGvk": {"group": "operator.kyma-project.io", "version": "v1beta2", "kind": "Kyma"},
        **extra,
    }


def request(
    port: int,
    context: ssl.SSLContext | None,
    path: str,
    body: Any = None,
    *,
    method: str = "POST",
    headers: dict[str, str] | None = None,
    raw: bytes | None = None,
) -> tuple[int, Any]:
    if context is None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    else:
        conn = http.client.HTTPSConnection("localhost", port, context=context, timeout=10)
    payload = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    try:
        conn.request(
            method, path, body=payload, headers={"Content-Type": "application/json", **(headers or {})}
        )
        response = conn.getresponse()
        data = response.read()
    finally:
        conn.close()
    try:
        return response.status, json.loads(data)
    except ValueError:
        return response.status, data.decode(errors="replace")


class PkiSnapshot:
    """CA and listener certificate rows, put back after each transactional test flushes them,
    so one listener process (which keeps its TLS material in memory) serves a whole module."""

    def __init__(self) -> None:
        from pki.models import Certificate, CertificateAuthority

        services.ca_bootstrap()
        services.listener_certificate()
        self.authorities = list(CertificateAuthority.objects.values())
        self.certificates = list(Certificate.objects.filter(kyma__isnull=True).values())

    def restore(self) -> None:
        from pki.models import Certificate, CertificateAuthority

        if not CertificateAuthority.objects.filter(pk=self.authorities[0]["id"]).exists():
            CertificateAuthority.objects.bulk_create(
                [CertificateAuthority(**row) for row in self.authorities]
            )
            Certificate.objects.bulk_create([Certificate(**row) for row in self.certificates])


def module_listener(django_db_blocker: Any, **options: Any) -> tuple[Listener, PkiSnapshot]:
    """A listener process for a whole test module, and a snapshot of the PKI it was started with
    (tests that use the database roll it back; :func:`listener_for_test` puts it back)."""
    with django_db_blocker.unblock():
        snapshot = PkiSnapshot()
        running = start_listener(**options)
    return running, snapshot


def listener_for_test(started: tuple[Listener, PkiSnapshot]) -> Listener:
    """The module's listener for one test: its PKI restored and the lifecycle-manager Watcher there."""
    running, snapshot = started
    snapshot.restore()
    klm_watcher()
    return running
