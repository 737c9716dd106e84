"""A real runtime as tests and benchmarks use it: the server, an administrator's client for
setting up and looking, the node stand-in, and the control plane's own identity there: the
ServiceAccount of ``deploy/runtime-access/`` (exactly the rights the project ships), whose token
goes into a Kyma's kubeconfig."""

from __future__ import annotations

import base64
import json
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes
import yaml
from kubernetes.client.rest import ApiException

from envtest.cluster import AuditEvent, RealRuntime
from envtest.node import Node

ROOT = Path(__file__).resolve().parents[1]
RUNTIME_ACCESS = ROOT / "deploy" / "runtime-access"
ACCESS_NAMESPACE = "kyma-control-plane"
ACCESS_ACCOUNT = "kyma-control-plane"
CONTROL_PLANE_USER = f"system:serviceaccount:{ACCESS_NAMESPACE}:{ACCESS_ACCOUNT}"
# The user agent of the probe that waits for the guard: not the control plane's own requests.
GUARD_PROBE_AGENT = "envtest-guard-probe"


def access_manifests() -> list[dict[str, Any]]:
    """What deploy/runtime-access/ ships, in its kustomization's order."""
    kustomization = yaml.safe_load((RUNTIME_ACCESS / "kustomization.yaml").read_text())
    docs: list[dict[str, Any]] = []
    for name in kustomization["resources"]:
        docs += [d for d in yaml.safe_load_all((RUNTIME_ACCESS / name).read_text()) if d]
    return docs


def wait_for(condition: Callable[[], Any], *, timeout: float = 30, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not reached within {timeout:.0f} s")
        time.sleep(0.05)


@dataclass
class Runtime:
    server: RealRuntime
    node: Node
    admin: kubernetes.client.ApiClient

    @property
    def name(self) -> str:
        return self.server.name

    # -- the administrator's view ----------------------------------------------------------------

    def apply(self, doc: dict[str, Any], *, manager: str = "envtest-admin") -> dict[str, Any]:
        """Server-side apply ``doc`` as the administrator (creates what is missing)."""
        return self.call("PATCH", self.path_of(doc), body=doc, apply_as=manager)

    def get(self, api_version: str, plural: str, name: str, namespace: str | None = None) -> dict | None:
        try:
            return self.call("GET", self.path(api_version, plural, name, namespace))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def list(
        self, api_version: str, plural: str, namespace: str | None = None, *, labels: str = ""
    ) -> list[dict[str, Any]]:
        query = [("labelSelector", labels)] if labels else []
        return self.call("GET", self.path(api_version, plural, None, namespace), query=query)["items"]

    def call(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        query: list[tuple[str, str]] | None = None,
        apply_as: str | None = None,
        content_type: str = "application/json",
    ) -> dict[str, Any]:
        query = list(query or ())
        if apply_as:
            query += [("fieldManager", apply_as), ("force", "true")]
            content_type = "application/apply-patch+yaml"
        response = self.admin.call_api(
            path,
            method,
            query_params=query,
            header_params={"Content-Type": content_type, "Accept": "application/json"},
            body=body,
            auth_settings=["BearerToken"],
            _preload_content=False,
            _return_http_data_only=True,
        )
        return response.json() if response.data else {}

    @staticmethod
    def path(api_version: str, plural: str, name: str | None = None, namespace: str | None = None) -> str:
        base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
        if namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{plural}"
        return f"{base}/{name}" if name else base

    def path_of(self, doc: dict[str, Any]) -> str:
        meta = doc["metadata"]
        return self.path(doc["apiVersion"], self.plural(doc), meta["name"], meta.get("namespace"))

    def plural(self, doc: dict[str, Any]) -> str:
        group_version = doc["apiVersion"]
        base = f"/api/{group_version}" if "/" not in group_version else f"/apis/{group_version}"
        resources = self.call("GET", base)["resources"]
        return next(r["name"] for r in resources if r["kind"] == doc["kind"] and "/" not in r["name"])

    # -- the control plane's identity --------------------------------------------------------------

    def grant_control_plane_access(self) -> str:
        """Apply deploy/runtime-access/ and return the token of its ServiceAccount (the kind
        of long-lived token an operator puts into the Kyma's kubeconfig)."""
        for doc in access_manifests():
            self.apply(doc)
        secret_name = f"{ACCESS_ACCOUNT}-token"

        def token() -> str:
            secret = self.get("v1", "secrets", secret_name, ACCESS_NAMESPACE) or {}
            data = secret.get("data") or {}
            return base64.b64decode(data["token"]).decode() if "token" in data else ""

        granted = wait_for(token, what="the token controller filling the ServiceAccount's Secret")
        # A real API server loads admission policies in the background: until the guard is in
        # force, the identity holds its RBAC rights alone. Wait until it refuses what it must.
        wait_for(lambda: self._guard_refuses(granted), what="the runtime-access guard in force")
        return granted

    def _guard_refuses(self, token: str) -> bool:
        """Whether the guard refuses the identity an unlabelled ConfigMap (a server-side dry run)."""
        request = urllib.request.Request(
            f"{self.server.url}/api/v1/namespaces/kyma-system/configmaps?dryRun=All",
            data=json.dumps({"metadata": {"generateName": "guard-probe-"}}).encode(),
            method="POST",
            headers={
                "Authorization": f"Bearer {token}",
                "Content-Type": "application/json",
                "User-Agent": GUARD_PROBE_AGENT,
            },
        )
        context = ssl.create_default_context(cadata=self.server.files.ca_pem.decode())
        try:
            with urllib.request.urlopen(request, timeout=10, context=context):
                return False
        except urllib.error.HTTPError as exc:
            return exc.code == 403 and b"ValidatingAdmissionPolicy" in exc.read()

    def control_plane_kubeconfig(self) -> dict[str, Any]:
        return self.server.kubeconfig(token=self.grant_control_plane_access(), user=ACCESS_ACCOUNT)

    def close(self) -> None:
        """Stop the node stand-in; the server itself belongs to its :class:`Cluster`."""
        self.node.close()
        self.admin.close()

    def control_plane_requests(self, since: int = 0) -> list[AuditEvent]:
        """What the control plane's identity asked of the server (the guard's probes left out)."""
        events = self.server.audit_events(since, user=CONTROL_PLANE_USER)
        return [event for event in events if event.user_agent != GUARD_PROBE_AGENT]

    def register_crd(self, crd: dict[str, Any]) -> None:
        self.apply(crd)
        name = crd["metadata"]["name"]

        def established() -> bool:
            live = self.get("apiextensions.k8s.io/v1", "customresourcedefinitions", name) or {}
            conditions = (live.get("status") or {}).get("conditions") or ()
            return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

        wait_for(established, what=f"CRD {name} established")
