"""Test helpers: certificates, a webhook client, review builders, metrics scraping.

Everything is real: the fake listener (``fake_kcp``) requires client certificates from the
runtime CA, the webhook client speaks TLS 1.3 to the watcher. Nothing of the watcher
itself is mocked.
"""

from __future__ import annotations

import datetime as dt
import http.client
import json
import os
import socket
import ssl
import time
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from pki.crypto import (
    KeyPair,
    bundle_to_pem,
    certificate_to_pem,
    create_ca,
    issue_certificate,
    private_key_to_pem,
)

WEBHOOK_DNS = "skr-webhook.kyma-system.svc"
KYMA_GVK = {"group": "operator.kyma-project.io", "version": "v1beta2", "kind": "Kyma"}


def wait_until(predicate: Callable[[], Any], timeout: float = 5.0, interval: float = 0.01) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(interval)


# --------------------------------------------------------------------------- certificates


@dataclass(frozen=True)
class Pki:
    """Two CAs (as during a CA rotation) and the leaf certificates the tests hand out."""

    ca_old: KeyPair
    ca_new: KeyPair
    runtime: KeyPair  # webhook server + client certificate, issued by ca_old
    runtime_rotated: KeyPair  # the same runtime after a certificate rotation (new CN and key)
    listener: KeyPair  # KCP listener server certificate for "localhost", issued by ca_new
    rogue_ca: KeyPair  # a CA the listener does not trust
    stranger: KeyPair  # runtime-like certificate issued by rogue_ca

    @property
    def bundle_pem(self) -> bytes:
        return bundle_to_pem([self.ca_old.certificate, self.ca_new.certificate])


def make_pki() -> Pki:
    now = dt.datetime.now(dt.UTC)
    year, day = dt.timedelta(days=365), dt.timedelta(days=1)
    ca_old = create_ca(common_name="kcp-watcher-ca-old", now=now, validity=year)
    ca_new = create_ca(common_name="kcp-watcher-ca-new", now=now, validity=year)
    rogue = create_ca(common_name="rogue-ca", now=now, validity=year)
    names = [WEBHOOK_DNS, f"{WEBHOOK_DNS}.cluster.local", "localhost"]

    def runtime(ca: KeyPair, cn: str) -> KeyPair:
        return issue_certificate(ca=ca, common_name=cn, dns_names=names, now=now, validity=day)

    return Pki(
        ca_old=ca_old,
        ca_new=ca_new,
        runtime=runtime(ca_old, "runtime-1"),
        runtime_rotated=runtime(ca_old, "runtime-1-rotated"),
        listener=issue_certificate(
            ca=ca_new,
            common_name="kcp-listener",
            dns_names=["localhost"],
            now=now,
            validity=day,
            client=False,
        ),
        rogue_ca=rogue,
        stranger=runtime(rogue, "stranger"),
    )


def write_atomically(path: Path, data: bytes) -> None:
    """Replace a file the way a Secret volume update does: new inode, atomic rename."""
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}")
    tmp.write_bytes(data)
    os.replace(tmp, path)


@dataclass(frozen=True)
class TlsFiles:
    ca: Path
    cert: Path
    key: Path

    @classmethod
    def write(cls, directory: Path, ca_pem: bytes, pair: KeyPair) -> TlsFiles:
        directory.mkdir(parents=True, exist_ok=True)
        files = cls(directory / "ca.crt", directory / "tls.crt", directory / "tls.key")
        files.ca.write_bytes(ca_pem)
        files.install(pair)
        return files

    def install(self, pair: KeyPair) -> None:
        # key first: a reader that sees the new certificate must also find the new key
        write_atomically(self.key, private_key_to_pem(pair.private_key))
        write_atomically(self.cert, certificate_to_pem(pair.certificate))


# --------------------------------------------------------------------------- webhook client


class WebhookClient:
    """Keep-alive HTTPS client to the watcher, verifying it like the API server would."""

    def __init__(self, port: int, ca_pem: bytes, *, server_name: str = WEBHOOK_DNS) -> None:
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        self.context.load_verify_locations(cadata=ca_pem.decode())
        self.port = port
        self.server_name = server_name
        self.conn = self._new_connection()

    def _new_connection(self) -> http.client.HTTPSConnection:
        conn = http.client.HTTPSConnection(self.server_name, self.port, context=self.context, timeout=5)
        # the service name does not resolve here: dial loopback, verify against the service name
        conn._create_connection = lambda address, timeout=None, source=None: socket.create_connection(  # type: ignore[attr-defined]
            ("127.0.0.1", self.port), timeout
        )
        return conn

    def request(
        self, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None
    ) -> tuple[int, http.client.HTTPMessage, bytes]:
        self.conn.request(method, path, body=body, headers=headers or {"Content-Type": "application/json"})
        response = self.conn.getresponse()
        data = response.read()
        if response.will_close:
            self.conn.close()
        return response.status, response.headers, data

    def review(self, component: str, body: bytes) -> dict[str, Any]:
        status, _, data = self.request("POST", f"/validate/{component}?timeout=10s", body)
        assert status == 200, (status, data)
        return json.loads(data)

    def peer_certificate(self) -> bytes:
        assert self.conn.sock is not None
        return self.conn.sock.getpeercert(binary_form=True)

    def close(self) -> None:
        self.conn.close()


# --------------------------------------------------------------------------- reviews


def kyma(
    name: str, *, namespace: str = "kyma-system", spec: Any = None, status: Any = None
) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "operator.kyma-project.io/v1beta2",
        "kind": "Kyma",
        "metadata": {"name": name, "namespace": namespace, "uid": str(uuid.uuid4())},
    }
    if spec is not None:
        obj["spec"] = spec
    if status is not None:
        obj["status"] = status
    return obj


def review(
    operation: str,
    obj: dict[str, Any] | None = None,
    old: dict[str, Any] | None = None,
    *,
    sub_resource: str = "",
    kind: dict[str, str] | None = None,
    uid: str | None = None,
    api_version: str = "admission.k8s.io/v1",
) -> bytes:
    source = obj or old or {}
    request: dict[str, Any] = {
        "uid": uid or str(uuid.uuid4()),
        "kind": kind or KYMA_GVK,
        "resource": {"group": "operator.kyma-project.io", "version": "v1beta2", "resource": "kymas"},
        "name": source.get("metadata", {}).get("name", ""),
        "namespace": source.get("metadata", {}).get("namespace", ""),
        "operation": operation,
        "userInfo": {"username": "system:admin"},
        "object": obj,
        "oldObject": old,
        "dryRun": False,
    }
    if sub_resource:
        request["subResource"] = sub_resource
    return json.dumps({"kind": "AdmissionReview", "apiVersion": api_version, "request": request}).encode()


def create(name: str) -> bytes:
    return review("CREATE", kyma(name, spec={"channel": "regular"}))


def event_body(name: str, namespace: str = "kyma-system") -> bytes:
    """The exact bytes upstream's Go watcher would POST for a Kyma."""
    return (
        b'{"watched":{"Namespace":"' + namespace.encode() + b'","Name":"' + name.encode() + b'"},'
        b'"watchedGvk":{"group":"operator.kyma-project.io","version":"v1beta2","kind":"Kyma"}}'
    )


def upstream_part(body: bytes) -> bytes:
    """A body without our trailing ``change`` (which upstream's listener ignores): the bytes
    upstream's watcher would have sent."""
    head, found, _ = body.partition(b',"change":')
    return head + b"}" if found else body


# --------------------------------------------------------------------------- metrics


def scrape(port: int) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples


def settled(port: int) -> dict:
    """Samples once nothing is queued or in flight: the listener may hold an event a moment
    before the sender has read the answer and counted it."""
    return scrape_when(port, lambda samples: metric(samples, "watcher_send_queue_depth") == 0)


def scrape_when(port: int, condition: Callable[[dict], bool], timeout: float = 5.0) -> dict:
    """Scrape until ``condition(samples)`` holds; returns those samples."""
    found: list[dict] = []

    def check() -> bool:
        found[:] = [scrape(port)]
        return condition(found[0])

    wait_until(check, timeout)
    return found[0]


def metric(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)
