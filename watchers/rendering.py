"""The runtime-watcher resources the control plane puts into every runtime (upstream's names).

In namespace ``kyma-system``: Secret ``skr-webhook-tls`` (``ca.crt``, ``tls.crt``, ``tls.key``),
Service and Deployment ``skr-webhook`` (our runtime watcher, ``python -m watchers.runtime``), and the
cluster-wide ValidatingWebhookConfiguration ``skr-webhook`` with one webhook per Watcher. The pod
template carries a label derived from the certificate, so a new certificate restarts the watcher.
Everything is a plain dict, rendered the same way every time, so content hashes say whether
anything changed.
"""

from __future__ import annotations

import base64
import copy
from collections.abc import Iterable
from typing import Any

from django.conf import settings

from kernel.documents.hashing import stamped
from pki.crypto import content_hash

from .models import Watcher, WatcherField

NAMESPACE = "kyma-system"
NAME = "skr-webhook"
SECRET_NAME = "skr-webhook-tls"
MANAGED_BY = {"operator.kyma-project.io/managed-by": "kyma"}
RESTART_LABEL = "operator.kyma-project.io/pod-restart-trigger"
CERT_DIR = "/etc/skr-webhook/tls"
WEBHOOK_PORT = 8443
METRICS_PORT = 2112
REDACTED = "<redacted>"


def webhook(watcher: Watcher, ca_bundle: bytes) -> dict[str, Any]:
    """One Watcher as a validating webhook (never blocking: failurePolicy Ignore)."""
    watched = watcher.resource_to_watch
    resource = watched["resource"]
    if watcher.field == WatcherField.STATUS:
        resource = f"{resource}/status"
    return {
        "name": watcher.webhook_name,
        "admissionReviewVersions": ["v1"],
        "clientConfig": {
            "caBundle": base64.b64encode(ca_bundle).decode(),
            "service": {
                "name": NAME,
                "namespace": NAMESPACE,
                "path": f"/validate/{watcher.component}",
                "port": 443,
            },
        },
        "rules": [
            {
                "apiGroups": [watched["group"]],
                "apiVersions": [watched["version"]],
                "resources": [resource],
                "operations": ["CREATE", "UPDATE", "DELETE"],
                "scope": "*",
            }
        ],
        "objectSelector": {"matchLabels": dict(watcher.labels_to_watch)},
        "sideEffects": "NoneOnDryRun",
        "failurePolicy": "Ignore",
        "timeoutSeconds": 15,
        "matchPolicy": "Equivalent",
    }


def webhook_configuration(watchers: Iterable[Watcher], ca_bundle: bytes) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": NAME, "labels": dict(MANAGED_BY)},
        "webhooks": [webhook(w, ca_bundle) for w in sorted(watchers, key=lambda w: w.webhook_name)],
    }


def secret(tls: dict[str, bytes]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": SECRET_NAME, "namespace": NAMESPACE, "labels": dict(MANAGED_BY)},
        "type": "Opaque",
        "data": {key: base64.b64encode(tls[key]).decode() for key in ("ca.crt", "tls.crt", "tls.key")},
    }


def service() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": NAME, "namespace": NAMESPACE, "labels": dict(MANAGED_BY)},
        "spec": {
            "selector": {"app": NAME},
            "ports": [
                {"name": "webhook", "port": 443, "targetPort": WEBHOOK_PORT, "protocol": "TCP"},
                {"name": "metrics", "port": METRICS_PORT, "targetPort": METRICS_PORT, "protocol": "TCP"},
            ],
        },
    }


def deployment(restart_trigger: str) -> dict[str, Any]:
    """Exactly our runtime watcher's entry point, configured by upstream's environment variables."""
    env = {
        "WEBHOOK_PORT": str(WEBHOOK_PORT),
        "METRICS_PORT": str(METRICS_PORT),
        "CA_CERT": f"{CERT_DIR}/ca.crt",
        "TLS_CERT": f"{CERT_DIR}/tls.crt",
        "TLS_KEY": f"{CERT_DIR}/tls.key",
        "KCP_ADDR": settings.WATCHER_KCP_ADDR,
        "KCP_CONTRACT": "v2",
        "HEARTBEAT_INTERVAL": str(settings.WATCHER_HEARTBEAT_INTERVAL),
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": NAME, "namespace": NAMESPACE, "labels": {**MANAGED_BY, "app": NAME}},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": NAME}},
            "template": {
                "metadata": {"labels": {"app": NAME, RESTART_LABEL: restart_trigger}},
                "spec": {
                    "securityContext": {"runAsNonRoot": True, "runAsUser": 10001, "runAsGroup": 10001},
                    "containers": [
                        {
                            "name": "server",
                            "image": settings.WATCHER_IMAGE,
                            "command": ["python", "-m", "watchers.runtime"],
                            "env": [{"name": k, "value": v} for k, v in env.items()],
                            "ports": [
                                {"name": "webhook", "containerPort": WEBHOOK_PORT},
                                {"name": "metrics", "containerPort": METRICS_PORT},
                            ],
                            "readinessProbe": {"httpGet": {"path": "/healthz", "port": METRICS_PORT}},
                            "livenessProbe": {"httpGet": {"path": "/healthz", "port": METRICS_PORT}},
                            "resources": {
                                "requests": {"cpu": "10m", "memory": "32Mi"},
                                "limits": {
                                    "cpu": settings.WATCHER_CPU_LIMIT,
                                    "memory": settings.WATCHER_MEMORY_LIMIT,
                                },
                            },
                            "securityContext": {
                                "allowPrivilegeEscalation": False,
                                "readOnlyRootFilesystem": True,
                                "capabilities": {"drop": ["ALL"]},
                            },
                            "volumeMounts": [{"name": "tls", "mountPath": CERT_DIR, "readOnly": True}],
                        }
                    ],
                    "volumes": [{"name": "tls", "secret": {"secretName": SECRET_NAME}}],
                },
            },
        },
    }


def runtime_watcher_resources(*, watchers: Iterable[Watcher], tls: dict[str, bytes]) -> list[dict[str, Any]]:
    """What one runtime needs, in apply order; each object carries its content hash."""
    restart = content_hash(tls["ca.crt"], tls["tls.crt"], tls["tls.key"])
    docs = [secret(tls), service(), deployment(restart), webhook_configuration(watchers, tls["ca.crt"])]
    return [stamped(doc) for doc in docs]


def redacted(docs: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The same documents with every Secret value replaced, for people to look at."""
    shown = []
    for doc in docs:
        doc = copy.deepcopy(doc)
        if doc.get("kind") == "Secret":
            doc["data"] = dict.fromkeys(doc.get("data", {}), REDACTED)
        shown.append(doc)
    return shown
