"""Manifests, certificates and a stand-alone HTTPS admission webhook for the emulator tests."""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import json
import ssl
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiohttp import web

from pki.crypto import KeyPair, issue_certificate
from runtime_emulator import crd_manifest

KYMA_CRD = crd_manifest(
    "operator.kyma-project.io", "Kyma", versions=("v1beta2", "v1beta1"), short_names=("kyma",)
)
WEBHOOK_HOST = "skr-webhook.kyma-system.svc"


def api_client(runtime: Any) -> Any:
    """A ``kubernetes`` ApiClient for an emulated runtime, from its kubeconfig (the caller closes it)."""
    from kubernetes import config

    return config.new_client_from_config_dict(runtime.kubeconfig())


def issue(ca: KeyPair, *names: str) -> KeyPair:
    now = dt.datetime.now(dt.UTC)
    return issue_certificate(
        ca=ca, common_name=names[0], dns_names=names, now=now, validity=dt.timedelta(hours=1)
    )


def kyma(name: str, namespace: str = "kyma-system", **spec: object) -> dict[str, object]:
    return {
        "apiVersion": "operator.kyma-project.io/v1beta2",
        "kind": "Kyma",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"channel": "regular", **spec},
    }


def deployment(
    name: str, namespace: str = "default", replicas: int = 1, image: str = "nginx:1.27"
) -> dict[str, object]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "main", "image": image}]},
            },
        },
    }


def server_context(pair: KeyPair) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    with tempfile.TemporaryDirectory() as tmp:
        cert, key = Path(tmp, "tls.crt"), Path(tmp, "tls.key")
        cert.write_bytes(pair.certificate_pem)
        key.write_bytes(pair.private_key_pem)
        context.load_cert_chain(cert, key)
    return context


Decision = Callable[[dict[str, Any]], dict[str, Any]]


def allow(request: dict[str, Any]) -> dict[str, Any]:
    return {"allowed": True}


class WebhookServer:
    """An HTTPS admission webhook in its own thread and event loop, as a separate pod would be.

    ``decide`` maps the AdmissionReview ``request`` to the ``response`` fields (uid is added);
    every review received is kept in ``reviews``.
    """

    def __init__(self, pair: KeyPair) -> None:
        self.reviews: list[dict[str, Any]] = []
        self.decide: Decision = allow
        self.delay = 0.0
        self.port = 0
        self._context = server_context(pair)
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    def start(self) -> None:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)

    def stop(self) -> None:
        assert self._runner is not None
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_post("/{path:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=self._context)
        await site.start()
        self.port = self._runner.addresses[0][1]

    async def _handle(self, request: web.Request) -> web.Response:
        review = await request.json()
        review["path"] = request.path
        review["host"] = request.headers.get("Host")
        self.reviews.append(review)
        if self.delay:
            await asyncio.sleep(self.delay)
        response = {"uid": review["request"]["uid"], **self.decide(review["request"])}
        return web.json_response(
            {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}
        )


def webhook_configuration(
    name: str,
    ca_pem: bytes,
    rules: list[dict[str, Any]],
    *,
    failure_policy: str = "Fail",
    timeout: int = 5,
    object_selector: dict[str, Any] | None = None,
    namespace_selector: dict[str, Any] | None = None,
    mutating: bool = False,
) -> dict[str, Any]:
    hook: dict[str, Any] = {
        "name": f"{name}.kyma-project.io",
        "admissionReviewVersions": ["v1"],
        "sideEffects": "None",
        "failurePolicy": failure_policy,
        "timeoutSeconds": timeout,
        "clientConfig": {
            "caBundle": base64.b64encode(ca_pem).decode(),
            "service": {"name": "skr-webhook", "namespace": "kyma-system", "path": f"/{name}", "port": 443},
        },
        "rules": rules,
    }
    if object_selector is not None:
        hook["objectSelector"] = object_selector
    if namespace_selector is not None:
        hook["namespaceSelector"] = namespace_selector
    kind = "MutatingWebhookConfiguration" if mutating else "ValidatingWebhookConfiguration"
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": name},
        "webhooks": [hook],
    }


def kyma_rules(
    *operations: str, resources: tuple[str, ...] = ("kymas", "kymas/status")
) -> list[dict[str, Any]]:
    return [
        {
            "apiGroups": ["operator.kyma-project.io"],
            "apiVersions": ["*"],
            "resources": list(resources),
            "operations": list(operations or ("CREATE", "UPDATE", "DELETE")),
        }
    ]


def json_patch(operations: list[dict[str, Any]]) -> str:
    return base64.b64encode(json.dumps(operations).encode()).decode()
