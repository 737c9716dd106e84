"""Processes of the interop tests: upstream's listener (Go, built from source) and our runtime watcher.

``UpstreamListener`` runs ``upstream-listener/`` (built by its ``build.sh`` into a cache outside the
repository): upstream's WatchEvent listener package, unchanged, behind a mutual-TLS front standing in
for the Istio gateway upstream deploys it behind. Its control port tells what happened:
``record()`` returns every request the front passed on, with the status and body upstream's
listener answered, and every event upstream's listener emitted on its channel, read back through
upstream's own Go types (``watched``, ``watchedGvk``, ``runtimeId``) plus ``watcherBody``: what
upstream's runtime watcher would have sent for that event (``json.Marshal`` of upstream's type).

``RuntimeWatcher`` runs ``python -m watchers.runtime`` as a real process (DESIGN.md contract 2).

Both run in their own session on their own ports and are stopped, process group and all, by
``stop()``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pki.crypto import certificate_to_pem, private_key_to_pem
from tests.support.processes import ROOT, Process, free_port
from tests.watchers.runtime.support import Pki, TlsFiles, WebhookClient, scrape, wait_until

BUILD_SCRIPT = Path(__file__).resolve().parent / "upstream-listener" / "build.sh"
COMPONENT = "lifecycle-manager"


def upstream_listener_binary() -> Path:
    """The built test server; built first when missing (``make interop``), a clear failure when
    that is impossible here (no Go)."""
    built = subprocess.run(["bash", str(BUILD_SCRIPT)], capture_output=True, text=True, check=False)
    if built.returncode != 0:
        pytest.fail(
            f"the gobuild tests need upstream's listener built: {built.stderr.strip()}", pytrace=False
        )
    paths = dict(line.split("=", 1) for line in built.stdout.split() if "=" in line)
    return Path(paths["upstream-listener"])


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except OSError:
        return 0, b""


@dataclass
class UpstreamListener:
    """Upstream's listener serving ``/v2/<component>/event`` over mutual TLS on ``port``."""

    binary: Path
    workdir: Path
    pki: Pki
    port: int
    component: str = COMPONENT
    process: Process | None = None

    def start(self) -> UpstreamListener:
        self.workdir.mkdir(parents=True, exist_ok=True)
        ca, cert, key = (self.workdir / name for name in ("ca.crt", "tls.crt", "tls.key"))
        # client certificates must chain to the runtime CA; the server certificate is "localhost"
        ca.write_bytes(certificate_to_pem(self.pki.ca_old.certificate))
        cert.write_bytes(certificate_to_pem(self.pki.listener.certificate))
        key.write_bytes(private_key_to_pem(self.pki.listener.private_key))
        self.control_port = free_port()
        argv = [
            str(self.binary),
            f"-listen=127.0.0.1:{self.port}",
            f"-upstream=127.0.0.1:{free_port()}",
            f"-control=127.0.0.1:{self.control_port}",
            f"-component={self.component}",
            f"-ca={ca}",
            f"-cert={cert}",
            f"-key={key}",
        ]
        self.process = Process("upstream-listener", argv, {"PATH": "/usr/bin:/bin"})
        self.process.wait_for(lambda: self._control("/healthz")[0] == 200, 15, "upstream's listener ready")
        return self

    @property
    def addr(self) -> str:
        return f"localhost:{self.port}"

    def _control(self, path: str, method: str = "GET") -> tuple[int, bytes]:
        url = f"http://127.0.0.1:{self.control_port}{path}"
        if method == "GET":
            return _get(url)
        request = urllib.request.Request(url, method=method)
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, response.read()

    def record(self) -> dict[str, list[dict[str, Any]]]:
        status, body = self._control("/record")
        assert status == 200, (status, body, self.output())
        return json.loads(body)

    def events(self) -> list[dict[str, Any]]:
        return self.record()["events"]

    def requests(self, path: str | None = None) -> list[dict[str, Any]]:
        return [r for r in self.record()["requests"] if path is None or r["path"] == path]

    def wait_for_events(self, count: int, timeout: float = 10) -> list[dict[str, Any]]:
        """The events once there are at least ``count``."""
        return wait_until(lambda: len(found := self.events()) >= count and found, timeout)

    def wait_for_requests(
        self, count: int, path: str | None = None, timeout: float = 10
    ) -> list[dict[str, Any]]:
        """The requests (to ``path``) once there are at least ``count``: the front records one just
        after its answer went out, so a client may have read the answer a moment earlier."""
        return wait_until(lambda: len(found := self.requests(path)) >= count and found, timeout)

    def forward_client_certificate(self, on: bool) -> None:
        self._control(f"/forward-client-cert?on={'true' if on else 'false'}", method="POST")

    def output(self) -> str:
        return self.process.output() if self.process else ""

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop(timeout=5)


@dataclass
class RuntimeWatcher:
    """Our runtime watcher process (``python -m watchers.runtime``) sending to ``kcp_addr``."""

    workdir: Path
    pki: Pki
    kcp_addr: str
    settings: dict[str, str]
    process: Process | None = None
    client: WebhookClient | None = None

    def start(self) -> RuntimeWatcher:
        files = TlsFiles.write(self.workdir / "watcher-tls", self.pki.bundle_pem, self.pki.runtime)
        self.webhook_port, self.metrics_port = free_port(), free_port()
        env = {
            "PATH": "/usr/bin:/bin",
            "PYTHONPATH": str(ROOT),
            "PYTHONUNBUFFERED": "1",
            "CA_CERT": str(files.ca),
            "TLS_CERT": str(files.cert),
            "TLS_KEY": str(files.key),
            "KCP_ADDR": self.kcp_addr,
            "WEBHOOK_PORT": str(self.webhook_port),
            "METRICS_PORT": str(self.metrics_port),
            "BIND_ADDRESS": "127.0.0.1",
            "HEARTBEAT_INTERVAL": "0",
            "BACKOFF_INITIAL": "0.05",
            "BACKOFF_MAX": "0.2",
            "SHUTDOWN_TIMEOUT": "1",
            **self.settings,
        }
        self.process = Process("runtime-watcher", [sys.executable, "-m", "watchers.runtime"], env)
        healthz = f"http://127.0.0.1:{self.metrics_port}/healthz"
        self.process.wait_for(lambda: _get(healthz)[0] == 200, 20, "runtime watcher healthy")
        self.client = WebhookClient(self.webhook_port, certificate_to_pem(self.pki.ca_old.certificate))
        return self

    def review(self, body: bytes, component: str = COMPONENT) -> dict[str, Any]:
        """Send an AdmissionReview as the API server would; returns the review's response."""
        assert self.client is not None, "the watcher is not started"
        return self.client.review(component, body)["response"]

    def samples(self) -> dict:
        return scrape(self.metrics_port)

    def output(self) -> str:
        return self.process.output() if self.process else ""

    def stop(self) -> None:
        if self.client is not None:
            self.client.close()
        if self.process is not None:
            self.process.stop(timeout=10)
