"""A module's manifest policy: which kinds and namespaces its SyncResources may put in a runtime.

The control plane applies SyncResources with its own identity in each runtime, shared by every
module, so without a policy one module team could push a ClusterRoleBinding or a webhook into
every runtime wherever that identity may write. The rule (which also decides the module's part of
the runtime's RBAC, ``reconciler.access``):

* a **namespaced** kind is allowed in the module's namespaces (``Module.manifest_namespaces``;
  empty means the namespace of the module's CR, e.g. ``kyma-system``);
* a **cluster-scoped** kind (ClusterRole, ClusterRoleBinding, webhook configurations, CRDs,
  Namespaces, ...) only when ``Module.manifest_kinds`` lists it;
* a kind whose scope is **unknown** only when listed too (then, with a namespace, only in the
  module's namespaces).

The scope of a kind comes from ``BUILTIN_SCOPES`` (Kubernetes' own kinds), the CRDs among the
same SyncResource's manifests, and, at apply time, the runtime's discovery (``fallback``). The
same check runs on every write (the model's ``clean``: API, admin, ``manage.py apply``) and just
before apply in the reconcile, which catches a policy tightened after the write.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from kernel.documents import schema

ANY = "*"

KIND_RULE_SCHEMA = schema.obj(
    {
        "group": schema.string(max_length=253),
        "version": schema.string(max_length=63),
        "kind": schema.string(min_length=1, max_length=63),
    },
    required=("group", "kind"),
)
KINDS_SCHEMA = {"type": "array", "items": KIND_RULE_SCHEMA, "maxItems": 200}
NAMESPACES_SCHEMA = {
    "type": "array",
    "items": schema.string(pattern=schema.DNS_LABEL_OR_ANY),
    "maxItems": 200,
    "uniqueItems": True,
}

_CLUSTER = False
_NAMESPACED = True
# (group, kind) -> namespaced. Kubernetes' own kinds; versions never change a kind's scope.
BUILTIN_SCOPES: dict[tuple[str, str], bool] = {
    **{
        ("", kind): _NAMESPACED
        for kind in (
            "ConfigMap",
            "Secret",
            "Service",
            "ServiceAccount",
            "Pod",
            "PodTemplate",
            "PersistentVolumeClaim",
            "Endpoints",
            "Event",
            "LimitRange",
            "ResourceQuota",
            "ReplicationController",
        )
    },
    **{("", kind): _CLUSTER for kind in ("Namespace", "Node", "PersistentVolume", "ComponentStatus")},
    **{
        ("apps", kind): _NAMESPACED
        for kind in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "ControllerRevision")
    },
    ("batch", "Job"): _NAMESPACED,
    ("batch", "CronJob"): _NAMESPACED,
    ("autoscaling", "HorizontalPodAutoscaler"): _NAMESPACED,
    ("policy", "PodDisruptionBudget"): _NAMESPACED,
    ("policy", "PodSecurityPolicy"): _CLUSTER,
    ("rbac.authorization.k8s.io", "Role"): _NAMESPACED,
    ("rbac.authorization.k8s.io", "RoleBinding"): _NAMESPACED,
    ("rbac.authorization.k8s.io", "ClusterRole"): _CLUSTER,
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"): _CLUSTER,
    ("networking.k8s.io", "NetworkPolicy"): _NAMESPACED,
    ("networking.k8s.io", "Ingress"): _NAMESPACED,
    ("networking.k8s.io", "IngressClass"): _CLUSTER,
    ("discovery.k8s.io", "EndpointSlice"): _NAMESPACED,
    ("coordination.k8s.io", "Lease"): _NAMESPACED,
    ("events.k8s.io", "Event"): _NAMESPACED,
    ("storage.k8s.io", "CSIStorageCapacity"): _NAMESPACED,
    **{
        ("storage.k8s.io", kind): _CLUSTER
        for kind in ("StorageClass", "CSIDriver", "CSINode", "VolumeAttachment", "VolumeAttributesClass")
    },
    **{
        ("admissionregistration.k8s.io", kind): _CLUSTER
        for kind in (
            "ValidatingWebhookConfiguration",
            "MutatingWebhookConfiguration",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
        )
    },
    ("apiextensions.k8s.io", "CustomResourceDefinition"): _CLUSTER,
    ("apiregistration.k8s.io", "APIService"): _CLUSTER,
    ("scheduling.k8s.io", "PriorityClass"): _CLUSTER,
    ("node.k8s.io", "RuntimeClass"): _CLUSTER,
    ("certificates.k8s.io", "CertificateSigningRequest"): _CLUSTER,
    ("flowcontrol.apiserver.k8s.io", "FlowSchema"): _CLUSTER,
    ("flowcontrol.apiserver.k8s.io", "PriorityLevelConfiguration"): _CLUSTER,
}

# The scope of (group, version, kind) when the tables do not know it: True namespaced, False
# cluster-scoped, None unknown (the reconcile asks the runtime's discovery).
ScopeLookup = Callable[[str, str, str], "bool | None"]


class PolicyHolder(Protocol):
    """What the policy needs of a Module (kept as a protocol so tests and callers need no row)."""

    name: str
    cr_namespace: str
    manifest_namespaces: list[str]
    manifest_kinds: list[dict[str, str]]


@dataclass(frozen=True)
class Refusal:
    """Manifest ``index`` (0-based, as in ``spec.manifests[index]``) is refused, and why."""

    index: int
    reason: str

    @property
    def path(self) -> str:
        return f"spec.manifests[{self.index}]"


def split_api_version(api_version: str) -> tuple[str, str]:
    group, _, version = api_version.rpartition("/")
    return group, version


def crd_scopes(docs: Iterable[dict[str, Any]]) -> dict[tuple[str, str], bool]:
    """Scopes declared by the CustomResourceDefinitions among ``docs``."""
    scopes = {}
    for doc in docs:
        if doc.get("kind") != "CustomResourceDefinition":
            continue
        spec = doc.get("spec") if isinstance(doc.get("spec"), dict) else {}
        names = spec.get("names") if isinstance(spec.get("names"), dict) else {}
        group, kind = spec.get("group"), names.get("kind")
        if (
            isinstance(group, str)
            and isinstance(kind, str)
            and spec.get("scope") in ("Namespaced", "Cluster")
        ):
            scopes[(group, kind)] = spec["scope"] == "Namespaced"
    return scopes


@dataclass(frozen=True)
class ManifestPolicy:
    module: str
    namespaces: tuple[str, ...]
    kinds: tuple[dict[str, str], ...]

    @classmethod
    def of(cls, module: PolicyHolder) -> ManifestPolicy:
        return cls(
            module=module.name,
            namespaces=tuple(module.manifest_namespaces or [module.cr_namespace]),
            kinds=tuple(module.manifest_kinds or ()),
        )

    def lists(self, group: str, version: str, kind: str) -> bool:
        return any(
            rule.get("group") in (ANY, group)
            and rule.get("version", ANY) in (ANY, "", version)
            and rule.get("kind") in (ANY, kind)
            for rule in self.kinds
        )

    def allows_namespace(self, namespace: str) -> bool:
        return ANY in self.namespaces or namespace in self.namespaces

    def _namespaces_text(self) -> str:
        return ", ".join(self.namespaces)

    def refusal(self, doc: dict[str, Any], namespaced: bool | None) -> str | None:
        """Why ``doc`` may not be applied (``None``: it may). ``namespaced`` is its kind's scope."""
        api_version, kind = doc["apiVersion"], doc["kind"]
        group, version = split_api_version(api_version)
        metadata = doc.get("metadata") or {}
        name, namespace = metadata.get("name", ""), metadata.get("namespace") or ""
        listed = self.lists(group, version, kind)
        gk = f"{group}/{kind}" if group else kind
        owner = f"module {self.module}'s manifest policy"
        if namespaced is None and not listed:
            return (
                f"{kind} ({api_version}) is not a kind whose scope the control plane knows; "
                f"{owner} must list {gk} to allow it"
            )
        if namespaced is False:
            return None if listed else f"{kind} {name} is cluster-scoped; {owner} does not list {gk}"
        if not namespace:
            if namespaced is None:
                return None  # listed, scope unknown, no namespace: the runtime's discovery decides
            allowed = self._namespaces_text()
            return f"{kind} {name} is namespaced and needs metadata.namespace (one of: {allowed})"
        if not self.allows_namespace(namespace):
            return (
                f"{kind} {namespace}/{name}: namespace {namespace} is not one of module {self.module}'s "
                f"namespaces ({self._namespaces_text()})"
            )
        return None

    def check(self, docs: Sequence[dict[str, Any]], fallback: ScopeLookup | None = None) -> list[Refusal]:
        """The refused manifests of ``docs`` (one SyncResource's, in order)."""
        declared = crd_scopes(docs)
        refusals = []
        for index, doc in enumerate(docs):
            group, version = split_api_version(doc["apiVersion"])
            key = (group, doc["kind"])
            namespaced = BUILTIN_SCOPES.get(key, declared.get(key))
            if namespaced is None and fallback is not None:
                namespaced = fallback(group, version, doc["kind"])
            reason = self.refusal(doc, namespaced)
            if reason is not None:
                refusals.append(Refusal(index, reason))
        return refusals
