"""The two API servers the contract suite runs against, set up alike and then used only through the
``kubernetes`` client: a real kube-apiserver (``envtest``) and a ``runtime_emulator`` runtime.

What differs is only how a test reaches what a cluster's network would provide: a webhook Service
is a selector-less Service with an EndpointSlice naming a pod address on the real server (it runs
with ``--enable-aggregator-routing``, so it calls that address), and an entry in the emulator's
``service_endpoints`` on the emulator.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import socket
import time
from collections.abc import Callable
from typing import Any

import kubernetes
from kubernetes.client.rest import ApiException

from envtest.certs import ADMIN_USER
from envtest.cluster import Cluster, RealRuntime
from envtest.node import PodAddresses
from pki.crypto import KeyPair
from runtime_emulator import EmulatorHost, RuntimeEmulator
from tests.kube.contract.webhook import WebhookServer

WAIT = 30.0  # seconds for something the server does in the background (a CRD being served)
_runtimes = itertools.count(1)


def wait_for(condition: Callable[[], Any], *, what: str, timeout: float = WAIT) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not reached within {timeout:.0f} s")
        time.sleep(0.05)


class Backend:
    """One API server and an administrator's client for it."""

    name: str
    username: str  # the administrator, as admission webhooks see it (userInfo.username)
    api: kubernetes.client.ApiClient

    def __init__(self) -> None:
        self._numbers = itertools.count(1)
        self._servers: list[WebhookServer] = []

    # -- namespaces and CRDs -------------------------------------------------------------------

    def namespace(self, prefix: str, labels: dict[str, str] | None = None) -> str:
        name = f"{prefix[:40].rstrip('-')}-{next(self._numbers)}"
        body = {"metadata": {"name": name, "labels": labels or {}}}
        kubernetes.client.CoreV1Api(self.api).create_namespace(body)
        return name

    def ensure_namespace(self, name: str) -> str:
        """A namespace of exactly this name (the product's ``kyma-system``), created when missing."""
        core = kubernetes.client.CoreV1Api(self.api)
        try:
            core.read_namespace(name)
        except ApiException as exc:
            if exc.status != 404:
                raise
            core.create_namespace({"metadata": {"name": name}})
        return name

    def served(self, group_version: str, kind: str) -> bool:
        try:
            response = self.api.call_api(
                f"/apis/{group_version}",
                "GET",
                header_params={"Accept": "application/json"},
                auth_settings=["BearerToken"],
                _preload_content=False,
                _return_http_data_only=True,
            )
        except ApiException:
            return False
        return any(r["kind"] == kind for r in json.loads(response.data).get("resources", ()))

    def register_crd(self, crd: dict[str, Any]) -> None:
        """Apply a CRD and wait until every served version of its kind is in discovery."""
        kubernetes.client.ApiextensionsV1Api(self.api).patch_custom_resource_definition(
            crd["metadata"]["name"],
            crd,
            field_manager="contract",
            force=True,
            _content_type="application/apply-patch+yaml",
        )
        spec = crd["spec"]
        kind = spec["names"]["kind"]
        for version in spec["versions"]:
            group_version = f"{spec['group']}/{version['name']}"
            wait_for(lambda gv=group_version: self.served(gv, kind), what=f"{group_version} served")

    # -- webhook Services --------------------------------------------------------------------------

    def webhook_server(self, *, ca: KeyPair, service: str, namespace: str) -> WebhookServer:
        """A webhook server reachable as port 443 of Service ``namespace/service``."""
        server = WebhookServer(ca=ca, service=service, namespace=namespace, address=self._address())
        self._servers.append(server)
        self.route(service, namespace, server.address, server.port)
        return server

    def dead_service(self, *, service: str, namespace: str) -> None:
        """A Service whose only endpoint refuses connections (its webhook pod is down)."""
        address = self._address()
        with socket.socket() as sock:  # a port nothing listens on
            sock.bind((address, 0))
            port = sock.getsockname()[1]
        self.route(service, namespace, address, port)

    def _address(self) -> str:
        raise NotImplementedError

    def route(self, service: str, namespace: str, address: str, port: int) -> None:
        raise NotImplementedError

    def close(self) -> None:
        for server in self._servers:
            server.close()
        self._servers.clear()
        self.api.close()


class RealBackend(Backend):
    """A kube-apiserver (and controller manager) of the session's etcd; no node is needed."""

    name = "real"
    username = ADMIN_USER

    def __init__(self, cluster: Cluster) -> None:
        super().__init__()
        self.cluster = cluster
        self.server: RealRuntime = cluster.runtime(f"contract{next(_runtimes)}")
        self.addresses = PodAddresses()
        self.api = kubernetes.config.new_client_from_config_dict(self.server.admin_kubeconfig())

    def _address(self) -> str:
        return self.addresses.take()

    def route(self, service: str, namespace: str, address: str, port: int) -> None:
        core = kubernetes.client.CoreV1Api(self.api)
        core.create_namespaced_service(
            namespace,
            {
                "metadata": {"name": service},
                "spec": {"ports": [{"name": "https", "port": 443, "targetPort": port, "protocol": "TCP"}]},
            },
        )
        kubernetes.client.DiscoveryV1Api(self.api).create_namespaced_endpoint_slice(
            namespace,
            {
                "metadata": {
                    "name": f"{service}-pod",
                    "labels": {"kubernetes.io/service-name": service},
                },
                "addressType": "IPv4",
                "endpoints": [{"addresses": [address], "conditions": {"ready": True}}],
                "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
            },
        )

    def close(self) -> None:
        try:
            super().close()
        finally:
            self.addresses.release_all()
            self.cluster.remove(self.server)


class EmulatorBackend(Backend):
    """One emulated runtime on its own host (loop thread)."""

    name = "emulator"
    username = "kubernetes-admin"

    def __init__(self) -> None:
        super().__init__()
        self.host = EmulatorHost()
        self.host.start()
        self.runtime: RuntimeEmulator = self.host.create("contract")
        self.api = kubernetes.config.new_client_from_config_dict(self.runtime.kubeconfig())

    def _address(self) -> str:
        return "127.0.0.1"

    def route(self, service: str, namespace: str, address: str, port: int) -> None:
        self.runtime.service_endpoints[namespace, service] = (address, port)

    def close(self) -> None:
        try:
            super().close()
        finally:
            with contextlib.suppress(Exception):
                self.host.stop()
