"""etcd and real API servers on loopback, started the way envtest starts them.

One :class:`Etcd` holds any number of runtimes; each :class:`RealRuntime` is a kube-apiserver
(with its own ``--etcd-prefix``, CA, serving certificate, administrator token, service-account
key and audit log) and a kube-controller-manager (deployments, replica sets, garbage collection,
namespaces, service accounts and their tokens, endpoint slices, cluster-role aggregation). What a
real cluster has beyond those, a scheduler, kubelets and a pod network, is what
:mod:`envtest.node` stands in for.
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import json
import shutil
import socket
import ssl
import tempfile
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envtest.binaries import Binaries
from envtest.certs import ADMIN_USER, CONTROLLER_MANAGER_USER, NODE_USER, ServerFiles, server_files
from envtest.processes import Child

SERVICE_CIDR = "10.96.0.0/16"
CONTROLLERS = (
    "deployment-controller",
    "replicaset-controller",
    "garbage-collector-controller",
    "namespace-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "endpointslice-controller",
    "clusterrole-aggregation-controller",
    "root-ca-certificate-publisher-controller",
)
# The control plane's own cluster (the install tier) runs Jobs (the migration), PodDisruptionBudgets
# (evictions they refuse) and removes finished Jobs, besides what a runtime needs.
CONTROL_PLANE_CONTROLLERS = (
    *CONTROLLERS,
    "job-controller",
    "disruption-controller",
    "ttl-after-finished-controller",
)
START_TIMEOUT = 120.0  # seconds; a cold start on a loaded 2-core machine takes about 10

# Metadata of every request made by a user (not the API server's or the controllers' own), so
# tests and benchmarks count a client's reads and writes as the server saw them.
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        {"level": "None", "users": ["system:apiserver", "system:kube-controller-manager"]},
        {"level": "None", "userGroups": ["system:serviceaccounts:kube-system", "system:nodes"]},
        {"level": "None", "nonResourceURLs": ["/healthz*", "/readyz*", "/livez*", "/version"]},
        {"level": "Metadata"},
    ],
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Etcd:
    """A single-member etcd on loopback, its data in a temporary directory (no fsync: tests)."""

    def __init__(self, binaries: Binaries, workdir: Path) -> None:
        self.workdir = workdir
        self.client_port, peer_port = free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.client_port}"
        peer = f"http://127.0.0.1:{peer_port}"
        self.child = Child(
            "etcd",
            [
                str(binaries.etcd),
                "--name=envtest",
                f"--data-dir={workdir / 'etcd'}",
                f"--listen-client-urls={self.url}",
                f"--advertise-client-urls={self.url}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=envtest={peer}",
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
            log=workdir / "etcd.log",
        )
        self.child.wait_until(self._healthy, timeout=START_TIMEOUT, what="etcd answering /health")

    def _healthy(self) -> bool:
        with urllib.request.urlopen(f"{self.url}/health", timeout=2) as response:
            return json.load(response).get("health") == "true"

    def stop(self) -> None:
        self.child.stop()


@dataclass
class AuditEvent:
    verb: str
    user: str
    resource: str
    subresource: str
    namespace: str
    name: str
    code: int
    uri: str
    user_agent: str = ""
    at: float = 0.0  # when the server received it (seconds since the epoch)

    @property
    def write(self) -> bool:
        return self.verb in ("create", "update", "patch", "delete", "deletecollection")

    @property
    def read(self) -> bool:
        return self.verb in ("get", "list")


def _seconds(stamp: str) -> float:
    """An audit timestamp (RFC 3339, microseconds) as seconds since the epoch (0: none)."""
    try:
        return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


class RealRuntime:
    """One kube-apiserver and kube-controller-manager on a prefix of a shared etcd."""

    def __init__(
        self,
        name: str,
        *,
        etcd: Etcd,
        binaries: Binaries,
        workdir: Path,
        service_cidr: str = SERVICE_CIDR,
        hosts: Sequence[str] = (),
        controllers: Sequence[str] = CONTROLLERS,
        wait: bool = True,
    ) -> None:
        self.name = name
        self.binaries, self.controllers = binaries, controllers
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        self.service_cidr = service_cidr
        # The Service "kubernetes" (the first address of the range) is how pods reach the server.
        self.service_address = str(ipaddress.ip_network(service_cidr)[1])
        self.files: ServerFiles = server_files(
            workdir / "pki", hosts=["127.0.0.1", "localhost", self.service_address, *hosts]
        )
        self.audit_log = workdir / "audit.log"
        policy = workdir / "audit-policy.json"
        policy.write_text(json.dumps(AUDIT_POLICY))
        self.apiserver = Child(
            f"kube-apiserver {name}",
            [
                str(binaries.kube_apiserver),
                f"--etcd-servers={etcd.url}",
                f"--etcd-prefix=/runtimes/{name}",
                "--bind-address=127.0.0.1",
                f"--secure-port={self.port}",
                f"--cert-dir={workdir / 'pki'}",
                f"--tls-cert-file={self.files.serving_cert}",
                f"--tls-private-key-file={self.files.serving_key}",
                f"--client-ca-file={self.files.ca_cert}",
                f"--token-auth-file={self.files.tokens}",
                "--authorization-mode=RBAC",
                f"--service-account-issuer=https://{name}.envtest.local",
                f"--service-account-key-file={self.files.service_account_public_key}",
                f"--service-account-signing-key-file={self.files.service_account_key}",
                f"--service-cluster-ip-range={service_cidr}",
                # Webhooks and aggregated APIs are called at an EndpointSlice address (a pod's),
                # not at a ClusterIP: there is no kube-proxy here to route one.
                "--enable-aggregator-routing=true",
                "--endpoint-reconciler-type=none",
                "--allow-privileged=true",
                f"--audit-policy-file={policy}",
                f"--audit-log-path={self.audit_log}",
                "--audit-log-format=json",
                "--audit-log-mode=blocking",
                "--profiling=false",
                "--v=1",
            ],
            log=workdir / "kube-apiserver.log",
        )
        self.admin_kubeconfig_path = workdir / "admin.kubeconfig"
        self.controller_manager: Child | None = None
        if wait:
            self.finish_start()

    def finish_start(self) -> None:
        """Wait for the API server, then start the controller manager (``wait=False`` leaves
        this to the caller: several servers then boot side by side)."""
        name, workdir = self.name, self.workdir
        self.apiserver.wait_until(self._ready, timeout=START_TIMEOUT, what="kube-apiserver /readyz")
        self.admin_kubeconfig_path.write_text(json.dumps(self.admin_kubeconfig()))
        manager_kubeconfig = workdir / "controller-manager.kubeconfig"
        manager_kubeconfig.write_text(json.dumps(self._identity(CONTROLLER_MANAGER_USER)))
        self.controller_manager = Child(
            f"kube-controller-manager {name}",
            [
                str(self.binaries.kube_controller_manager),
                f"--kubeconfig={manager_kubeconfig}",
                f"--authentication-kubeconfig={manager_kubeconfig}",
                f"--authorization-kubeconfig={manager_kubeconfig}",
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={self.files.service_account_key}",
                f"--root-ca-file={self.files.ca_cert}",
                "--leader-elect=false",
                "--secure-port=0",
                f"--cluster-name={name}",
                # What a runtime's objects need: workloads and their garbage, service accounts
                # and tokens, endpoint slices, aggregated roles. Nodes are envtest.node's (no
                # heartbeats, no pod CIDRs); fewer informers start sooner on a busy machine.
                "--controllers=" + ",".join(self.controllers),
                "--v=1",
            ],
            log=workdir / "kube-controller-manager.log",
        )

    # -- access -------------------------------------------------------------------------------

    def kubeconfig(self, *, token: str, user: str = ADMIN_USER) -> dict[str, Any]:
        """A kubeconfig dict for this server and a bearer ``token``."""
        ca = base64.b64encode(self.files.ca_pem).decode()
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": self.name, "cluster": {"server": self.url, "certificate-authority-data": ca}}
            ],
            "users": [{"name": user, "user": {"token": token}}],
            "contexts": [{"name": self.name, "context": {"cluster": self.name, "user": user}}],
            "current-context": self.name,
            "preferences": {},
        }

    def admin_kubeconfig(self) -> dict[str, Any]:
        return self._identity(ADMIN_USER)

    def node_kubeconfig(self) -> dict[str, Any]:
        return self._identity(NODE_USER)

    def _identity(self, user: str) -> dict[str, Any]:
        return self.kubeconfig(token=self.files.token_of[user], user=user)

    def request(self, path: str, *, token: str | None = None, timeout: float = 5) -> tuple[int, bytes]:
        """``GET path`` as the administrator (or ``token``); the status and body."""
        context = ssl.create_default_context(cadata=self.files.ca_pem.decode())
        request = urllib.request.Request(
            self.url + path, headers={"Authorization": f"Bearer {token or self.files.admin_token}"}
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    def _ready(self) -> bool:
        return self.request("/readyz", timeout=2)[0] == 200

    # -- the audit log ------------------------------------------------------------------------

    def audit_mark(self) -> int:
        """A position in the audit log; :meth:`audit_events` reads what came after it."""
        return self.audit_log.stat().st_size if self.audit_log.exists() else 0

    def audit_events(self, since: int = 0, *, user: str | None = None) -> list[AuditEvent]:
        if not self.audit_log.exists():
            return []
        with open(self.audit_log, "rb") as handle:
            handle.seek(since)
            lines = handle.read().splitlines()
        events = []
        for line in lines:
            entry = json.loads(line)
            ref = entry.get("objectRef") or {}
            who = (entry.get("user") or {}).get("username", "")
            if user is not None and who != user:
                continue
            events.append(
                AuditEvent(
                    verb=entry.get("verb", ""),
                    user=who,
                    resource=ref.get("resource", ""),
                    subresource=ref.get("subresource", ""),
                    namespace=ref.get("namespace", ""),
                    name=ref.get("name", ""),
                    code=(entry.get("responseStatus") or {}).get("code", 0),
                    uri=entry.get("requestURI", ""),
                    user_agent=entry.get("userAgent", ""),
                    at=_seconds(entry.get("requestReceivedTimestamp", "")),
                )
            )
        return events

    # -- lifecycle ----------------------------------------------------------------------------

    def stop(self) -> None:
        if self.controller_manager is not None:
            self.controller_manager.stop()
        self.apiserver.stop()

    def children(self) -> Iterator[Child]:
        yield self.apiserver
        if self.controller_manager is not None:
            yield self.controller_manager


class Cluster:
    """One etcd and the runtimes started on it; ``with Cluster() as c: rt = c.runtime("a")``."""

    def __init__(self, binaries: Binaries | None = None, workdir: Path | None = None) -> None:
        self.binaries = binaries or Binaries.locate()
        self._own_workdir = workdir is None
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="envtest-"))
        self.etcd = Etcd(self.binaries, self.workdir)
        self.runtimes: dict[str, RealRuntime] = {}

    def runtime(self, name: str, **options: Any) -> RealRuntime:
        """A new API server and controller manager (``options``: see :class:`RealRuntime`)."""
        if name in self.runtimes:
            raise ValueError(f"runtime {name!r} exists already")
        runtime = RealRuntime(
            name, etcd=self.etcd, binaries=self.binaries, workdir=self.workdir / name, **options
        )
        self.runtimes[name] = runtime
        return runtime

    def remove(self, runtime: RealRuntime) -> None:
        runtime.stop()
        self.runtimes.pop(runtime.name, None)

    def close(self) -> None:
        for runtime in list(self.runtimes.values()):
            runtime.stop()
        self.runtimes.clear()
        self.etcd.stop()
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
