"""The runtime-watcher resources the control plane puts into every runtime (upstream's names).

In namespace ``kyma-system``: Secret ``skr-webhook-tls`` (``ca.crt``, ``tls.crt``, ``tls.key``),
Service and Deployment ``skr-webhook`` (our runtime watcher, ``python -m watchers.runtime``), and the
cluster-wide ValidatingWebhookConfiguration ``skr-webhook`` with one webhook per Watcher. The pod
template carries a label derived from the certificate, so a new certificate restarts the watcher.

Customers run ``kyma-system`` with deny-all NetworkPolicies and the "restricted" Pod Security
Standard, so, like upstream's ``skr-webhook`` resources, the watcher also brings what it needs
there: four NetworkPolicies selecting its pod (API server → webhook port, watcher → the KCP
listener's port, DNS, metrics scraping), a pod that passes "restricted" (non-root, no privilege
escalation, no capabilities, ``RuntimeDefault`` seccomp, read-only root filesystem), the Istio
sidecar opt-out label, the cluster-wide PriorityClass ``skr-webhook-priority`` and a separate
metrics Service ``skr-webhook-metrics``. With ``WATCHER_IMAGE_PULL_SECRET_FILE`` set, the docker
config it names becomes the Secret ``skr-webhook-pull-secret`` the Deployment pulls its image with.
Everything is a plain dict, rendered the same way every time, so content hashes say whether
anything changed.

Beyond the Watchers, the webhook configuration always carries one more webhook,
``module-crs.operator.kyma-project.io``, with a rule for the CR kind of every module in the catalog
(the design: the watcher "needs to extend validating webhook configurations for Module CR"). Its
events go to the lifecycle-manager component, so a user's edit of a module CR reconciles the Kyma,
which copies the CR's spec into its ModuleConfig for the module's manager: no Watcher per module.
And one more, ``owned-objects.operator.kyma-project.io``: an update or deletion of the control
plane's own objects of the kinds it otherwise only rechecks now and then (the PriorityClass, the
NetworkPolicies, the Services, the CRDs, the catalog's mirror) reconciles the Kyma at once.
"""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from django.conf import settings

from fleet.k8s.ownership import MANAGED_BY, UPSTREAM_MANAGER
from fleet.models import Module
from kernel.documents.dockerconfig import read_docker_config
from kernel.documents.hashing import HASH_ANNOTATION, document_hash, stamped
from pki.crypto import content_hash

from .models import Watcher, WatcherField

NAMESPACE = "kyma-system"
NAME = "skr-webhook"
SECRET_NAME = "skr-webhook-tls"
PULL_SECRET_NAME = "skr-webhook-pull-secret"
METRICS_SERVICE_NAME = "skr-webhook-metrics"
PRIORITY_CLASS_NAME = "skr-webhook-priority"
# Upstream's value: high, yet below the system-* classes (2,000,000,000 and up). A PriorityClass's
# value cannot change: runtimes that hold our earlier 2,000,000 get it replaced (watcher_resources).
PRIORITY = 1_000_000_000
ISTIO_INJECT = {"sidecar.istio.io/inject": "false"}
RESTART_LABEL = "operator.kyma-project.io/pod-restart-trigger"
CERT_DIR = "/etc/skr-webhook/tls"
WEBHOOK_PORT = 8443
METRICS_PORT = 2112
REDACTED = "<redacted>"
DNS_PORT = 53
# Upstream's names (lifecycle-manager's skr-webhook/resources.yaml), so that a runtime upstream
# managed before ends with one set: API server -> webhook, watcher -> KCP, DNS, scraping.
NETWORK_POLICIES = (
    "kyma-project.io--seed-to-watcher",
    "kyma-project.io--watcher-to-apiserver",
    "kyma-project.io--watcher-to-dns",
    "kyma-project.io--metrics-to-watcher",
)
# What this project named them before; removed from runtimes that still hold them.
LEGACY_NETWORK_POLICIES = tuple(f"{NAME}-allow-{what}" for what in ("apiserver", "kcp", "dns", "metrics"))
# Field managers whose fields in these objects are ours to take over (upstream applied them as
# "lifecycle-manager"): their fields move to our manager, and what only they set is removed.
ADOPTED_MANAGERS = (UPSTREAM_MANAGER,)


@dataclass(frozen=True)
class WatcherConfig:
    """The runtime watcher's image and settings every runtime gets (``WATCHER_IMAGE``,
    ``WATCHER_KCP_ADDR``, ...). A change of them goes out in a rollout, so a runtime renders its
    own (``watchers.runtime_config``), not necessarily this process's."""

    image: str
    kcp_addr: str
    heartbeat_interval: int
    cpu_limit: str
    memory_limit: str

    @classmethod
    def from_settings(cls) -> WatcherConfig:
        return cls(
            image=settings.WATCHER_IMAGE,
            kcp_addr=settings.WATCHER_KCP_ADDR,
            heartbeat_interval=settings.WATCHER_HEARTBEAT_INTERVAL,
            cpu_limit=settings.WATCHER_CPU_LIMIT,
            memory_limit=settings.WATCHER_MEMORY_LIMIT,
        )

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> WatcherConfig:
        return cls(
            image=str(values["image"]),
            kcp_addr=str(values["kcpAddr"]),
            heartbeat_interval=int(values["heartbeatInterval"]),
            cpu_limit=str(values["cpuLimit"]),
            memory_limit=str(values["memoryLimit"]),
        )

    def as_dict(self) -> dict[str, Any]:
        names = {"kcp_addr": "kcpAddr", "heartbeat_interval": "heartbeatInterval"}
        names.update(cpu_limit="cpuLimit", memory_limit="memoryLimit")
        return {names.get(key, key): value for key, value in asdict(self).items()}

    @property
    def digest(self) -> str:
        return document_hash(self.as_dict())


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


MODULE_CRS_WEBHOOK = "module-crs.operator.kyma-project.io"


def module_cr_kinds() -> list[tuple[str, str, str]]:
    """``(group, version, plural)`` of every module CR kind in the catalog, sorted."""
    found = Module.objects.exclude(cr_plural="").values_list("cr_group", "cr_version", "cr_plural")
    return sorted(set(found))


def module_crs_webhook(kinds: Iterable[tuple[str, str, str]], ca_bundle: bytes) -> dict[str, Any]:
    """The webhook that reports every module CR change (its spec) to the lifecycle-manager
    component, whose events reconcile the runtime's Kyma."""
    return {
        "name": MODULE_CRS_WEBHOOK,
        "admissionReviewVersions": ["v1"],
        "clientConfig": {
            "caBundle": base64.b64encode(ca_bundle).decode(),
            "service": {
                "name": NAME,
                "namespace": NAMESPACE,
                "path": f"/validate/{settings.LISTENER_RECONCILE_COMPONENT}",
                "port": 443,
            },
        },
        "rules": [
            {
                "apiGroups": [group],
                "apiVersions": [version],
                "resources": [plural],
                "operations": ["CREATE", "UPDATE", "DELETE"],
                "scope": "*",
            }
            for group, version, plural in kinds
        ],
        "sideEffects": "NoneOnDryRun",
        "failurePolicy": "Ignore",
        "timeoutSeconds": 15,
        "matchPolicy": "Equivalent",
    }


OWNED_OBJECTS_WEBHOOK = "owned-objects.operator.kyma-project.io"


def owned_objects_webhook(kinds: Iterable[tuple[str, str, str, bool]], ca_bundle: bytes) -> dict[str, Any]:
    """The webhook that reports an update or deletion of the control plane's own objects (those
    labelled ``managed-by: kyma``) of ``kinds`` (``(group, version, plural, namespaced)``: the
    kinds that are otherwise only rechecked now and then, ``reconciler.steps``) to the
    lifecycle-manager component: a deleted PriorityClass or an edited NetworkPolicy reconciles the
    Kyma at once, and that reconcile reads and repairs every kind the control plane owns there."""
    return {
        "name": OWNED_OBJECTS_WEBHOOK,
        "admissionReviewVersions": ["v1"],
        "clientConfig": {
            "caBundle": base64.b64encode(ca_bundle).decode(),
            "service": {
                "name": NAME,
                "namespace": NAMESPACE,
                "path": f"/validate/{settings.LISTENER_RECONCILE_COMPONENT}",
                "port": 443,
            },
        },
        "rules": [
            {
                "apiGroups": [group],
                "apiVersions": [version],
                "resources": [plural],
                "operations": ["UPDATE", "DELETE"],
                "scope": "Namespaced" if namespaced else "Cluster",
            }
            for group, version, plural, namespaced in kinds
        ],
        "objectSelector": {"matchLabels": dict(MANAGED_BY)},
        "sideEffects": "NoneOnDryRun",
        "failurePolicy": "Ignore",
        "timeoutSeconds": 15,
        "matchPolicy": "Equivalent",
    }


def webhook_configuration(
    watchers: Iterable[Watcher],
    ca_bundle: bytes,
    module_kinds: Iterable[tuple[str, str, str]] = (),
    owned_kinds: Iterable[tuple[str, str, str, bool]] = (),
) -> dict[str, Any]:
    webhooks = [webhook(w, ca_bundle) for w in sorted(watchers, key=lambda w: w.webhook_name)]
    kinds = list(module_kinds)
    if kinds:
        webhooks.append(module_crs_webhook(kinds, ca_bundle))
    owned = list(owned_kinds)
    if owned:
        webhooks.append(owned_objects_webhook(owned, ca_bundle))
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": NAME, "labels": dict(MANAGED_BY)},
        "webhooks": webhooks,
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


def metrics_service() -> dict[str, Any]:
    """The metrics port on its own Service, as upstream scrapes it (a ServiceMonitor selects it)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": METRICS_SERVICE_NAME,
            "namespace": NAMESPACE,
            "labels": {**MANAGED_BY, "app": NAME},
        },
        "spec": {
            "selector": {"app": NAME},
            "ports": [
                {"name": "metrics", "port": METRICS_PORT, "targetPort": METRICS_PORT, "protocol": "TCP"}
            ],
        },
    }


def priority_class() -> dict[str, Any]:
    """Keeps the watcher scheduled when a runtime is short of resources (never the default)."""
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": PRIORITY_CLASS_NAME, "labels": dict(MANAGED_BY)},
        "value": PRIORITY,
        "globalDefault": False,
        "preemptionPolicy": "PreemptLowerPriority",
        "description": "The Kyma runtime watcher (skr-webhook).",
    }


def kcp_port(config: WatcherConfig | None = None) -> int:
    """The listener's port as runtimes reach it (``WATCHER_KCP_ADDR``; 443 when it names none)."""
    _, colon, port = (config or WatcherConfig.from_settings()).kcp_addr.rpartition(":")
    return int(port) if colon and port.isdigit() else 443


def pull_secret(docker_config: bytes) -> dict[str, Any]:
    """The registry credentials the watcher's image is pulled with."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": PULL_SECRET_NAME, "namespace": NAMESPACE, "labels": dict(MANAGED_BY)},
        "type": "kubernetes.io/dockerconfigjson",
        "data": {".dockerconfigjson": base64.b64encode(docker_config).decode()},
    }


def docker_config() -> bytes | None:
    """``WATCHER_IMAGE_PULL_SECRET_FILE``'s content, read now; ``None`` when it is not set.
    Raises :class:`DockerConfigError` when the file became unusable since the start."""
    path = settings.WATCHER_IMAGE_PULL_SECRET_FILE
    return read_docker_config(path) if path else None


def _network_policy(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": dict(MANAGED_BY)},
        "spec": {"podSelector": {"matchLabels": {"app": NAME}}, **spec},
    }


def network_policies(config: WatcherConfig | None = None) -> list[dict[str, Any]]:
    """What the watcher needs through a deny-all ``kyma-system``: admission calls from the API
    server (any source: its address differs per provider), events to the KCP listener (any
    destination, as upstream: the listener sits behind a load balancer), DNS, and scraping."""
    apiserver, kcp, dns, metrics = NETWORK_POLICIES
    return [
        _network_policy(
            apiserver,
            {
                "policyTypes": ["Ingress"],
                "ingress": [{"ports": [{"protocol": "TCP", "port": WEBHOOK_PORT}]}],
            },
        ),
        _network_policy(
            kcp,
            {
                "policyTypes": ["Egress"],
                "egress": [{"ports": [{"protocol": "TCP", "port": kcp_port(config)}]}],
            },
        ),
        _network_policy(
            dns,
            {
                "policyTypes": ["Egress"],
                "egress": [
                    {
                        "ports": [
                            {"protocol": "UDP", "port": DNS_PORT},
                            {"protocol": "TCP", "port": DNS_PORT},
                        ]
                    }
                ],
            },
        ),
        _network_policy(
            metrics,
            {
                "policyTypes": ["Ingress"],
                "ingress": [{"ports": [{"protocol": "TCP", "port": METRICS_PORT}]}],
            },
        ),
    ]


def deployment(
    restart_trigger: str, *, pull_secret: bool = False, config: WatcherConfig | None = None
) -> dict[str, Any]:
    """Exactly our runtime watcher's entry point, configured by upstream's environment variables."""
    config = config or WatcherConfig.from_settings()
    env = {
        "WEBHOOK_PORT": str(WEBHOOK_PORT),
        "METRICS_PORT": str(METRICS_PORT),
        "CA_CERT": f"{CERT_DIR}/ca.crt",
        "TLS_CERT": f"{CERT_DIR}/tls.crt",
        "TLS_KEY": f"{CERT_DIR}/tls.key",
        "KCP_ADDR": config.kcp_addr,
        "KCP_CONTRACT": "v2",
        "HEARTBEAT_INTERVAL": str(config.heartbeat_interval),
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": NAME, "namespace": NAMESPACE, "labels": {**MANAGED_BY, "app": NAME}},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": NAME}},
            "template": {
                "metadata": {"labels": {"app": NAME, RESTART_LABEL: restart_trigger, **ISTIO_INJECT}},
                "spec": {
                    "priorityClassName": PRIORITY_CLASS_NAME,
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": 10001,
                        "runAsGroup": 10001,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "containers": [
                        {
                            "name": "server",
                            "image": config.image,
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
                                    "cpu": config.cpu_limit,
                                    "memory": config.memory_limit,
                                },
                            },
                            "securityContext": {
                                "allowPrivilegeEscalation": False,
                                "readOnlyRootFilesystem": True,
                                "runAsNonRoot": True,
                                "capabilities": {"drop": ["ALL"]},
                            },
                            "volumeMounts": [{"name": "tls", "mountPath": CERT_DIR, "readOnly": True}],
                        }
                    ],
                    "volumes": [{"name": "tls", "secret": {"secretName": SECRET_NAME}}],
                    **({"imagePullSecrets": [{"name": PULL_SECRET_NAME}]} if pull_secret else {}),
                },
            },
        },
    }


def runtime_watcher_resources(
    *,
    watchers: Iterable[Watcher],
    tls: dict[str, bytes],
    module_kinds: Iterable[tuple[str, str, str]] | None = None,
    owned_kinds: Iterable[tuple[str, str, str, bool]] = (),
    config: WatcherConfig | None = None,
) -> list[dict[str, Any]]:
    """What one runtime needs, in apply order (what the pod needs before the pod, the webhooks
    last); each object carries its content hash. ``module_kinds`` defaults to the catalog's
    (:func:`module_cr_kinds`), ``owned_kinds`` (the kinds of the control plane's own objects whose
    changes it reports: :func:`owned_objects_webhook`) to none, ``config`` to this process's
    settings (a runtime's own: ``watchers.runtime_config``). Raises :class:`DockerConfigError`
    when the image pull secret's file cannot be used.

    Content hashes are what rendering costs (hashing a document takes several times what
    building it does), so each is remembered per process by what the document is made of
    (:func:`_stamped_as`): the settings for the PriorityClass, NetworkPolicies and Services, the
    Watchers' entries, the CA bundle and the kinds for the webhook configuration, the certificate
    material for the Secret and the Deployment. The documents are built afresh every time (a
    caller may change its own)."""
    if module_kinds is None:
        module_kinds = module_cr_kinds()
    config = config or WatcherConfig.from_settings()
    restart = content_hash(tls["ca.crt"], tls["tls.crt"], tls["tls.key"])
    registry = docker_config()
    constant = [_stamped_as(("constant", config, n), doc) for n, doc in enumerate(_constant_docs(config))]
    watchers = sorted(watchers, key=lambda w: w.webhook_name)
    module_kinds, owned_kinds = tuple(module_kinds), tuple(owned_kinds)
    webhooks = _stamped_as(
        (
            "webhooks",
            tuple(_entry_key(w) for w in watchers),
            tls["ca.crt"],
            module_kinds,
            owned_kinds,
            settings.LISTENER_RECONCILE_COMPONENT,
        ),
        webhook_configuration(watchers, tls["ca.crt"], module_kinds, owned_kinds),
    )
    return [
        *constant[:-2],
        _stamped_as(("secret", restart), secret(tls)),
        *([stamped(pull_secret(registry))] if registry is not None else []),
        *constant[-2:],
        _stamped_as(
            ("deployment", restart, registry is not None, config),
            deployment(restart, pull_secret=registry is not None, config=config),
        ),
        webhooks,
    ]


def _constant_docs(config: WatcherConfig) -> list[dict[str, Any]]:
    """The objects that depend on the settings alone, in apply order; the two Services last."""
    return [priority_class(), *network_policies(config), service(), metrics_service()]


def _entry_key(watcher: Watcher) -> str:
    """What a Watcher's webhook entry is rendered from (its entry without the CA bundle)."""
    return json.dumps(webhook(watcher, b""), sort_keys=True)


# The content hashes of the documents, by what each is made of (for a runtime's own Secret and
# Deployment the content hash of its certificate material, ``restart``, not the material itself).
_DIGESTS: dict[tuple, str] = {}
_DIGESTS_MAX = 100_000


def _stamped_as(key: tuple, doc: dict[str, Any]) -> dict[str, Any]:
    """:func:`stamped`, with the hash remembered under ``key`` (all that ``doc`` is made of)."""
    digest = _DIGESTS.get(key)
    if digest is None:
        if len(_DIGESTS) >= _DIGESTS_MAX:
            _DIGESTS.clear()
        digest = _DIGESTS[key] = document_hash(doc)
    doc.setdefault("metadata", {}).setdefault("annotations", {})[HASH_ANNOTATION] = digest
    return doc


def removal_order() -> list[tuple[str, str, str, str | None]]:
    """``(apiVersion, kind, name, namespace)`` of everything we render, webhooks first (so nothing
    calls a stopped server), then the pod, then what it needed."""
    namespaced = [
        ("apps/v1", "Deployment", NAME),
        ("v1", "Service", NAME),
        ("v1", "Service", METRICS_SERVICE_NAME),
        ("v1", "Secret", SECRET_NAME),
        ("v1", "Secret", PULL_SECRET_NAME),
        *(("networking.k8s.io/v1", "NetworkPolicy", name) for name in NETWORK_POLICIES),
    ]
    return [
        ("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration", NAME, None),
        *((api_version, kind, name, NAMESPACE) for api_version, kind, name in namespaced),
        ("scheduling.k8s.io/v1", "PriorityClass", PRIORITY_CLASS_NAME, None),
    ]


def redacted(docs: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The same documents with every Secret value replaced, for people to look at."""
    shown = []
    for doc in docs:
        doc = copy.deepcopy(doc)
        if doc.get("kind") == "Secret":
            doc["data"] = dict.fromkeys(doc.get("data", {}), REDACTED)
        shown.append(doc)
    return shown
