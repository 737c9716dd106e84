"""What the control plane may do in a runtime: the RBAC its kubeconfig's identity needs, rendered
from what the reconciler writes there. Nothing like cluster-admin.

The **base** (``deploy/runtime-access/``, the same for every runtime, checked against
:func:`base_manifests` by the tests) gives a ServiceAccount ``kyma-control-plane`` in its own
namespace:

- cluster-wide, only the objects it owns, by name: the CRDs of the Kyma and of the catalog's
  mirror (ModuleTemplate, ModuleReleaseMeta), the namespace ``kyma-system``,
  the PriorityClass and the ValidatingWebhookConfiguration of the runtime watcher; plus reading
  CRDs (to learn a module CR's scope) and listing PriorityClasses and webhook configurations
  (one labelled list rechecks several at once). ``create`` is named too: the reconciler creates
  these by server-side apply, which the API server authorizes as ``create`` of that name;
- in ``kyma-system``, everything namespaced: the runtime watcher's objects, the runtime's Kyma,
  the module CRs and the modules' manifests, which the manifest policy allows to be any namespaced
  kind in a module's namespaces (``kyma-system`` unless a module says otherwise).

A module whose manifest policy reaches further (namespaces other than ``kyma-system``,
cluster-scoped kinds, a CR outside ``kyma-system``) needs **module rules**, rendered from the
catalog by :func:`module_manifests` (``manage.py runtime_access``): a Role per extra namespace and a
ClusterRole for its cluster-scoped kinds, each bound to the same ServiceAccount. A write outside
these rights is refused by the runtime's API server (403) and shown as a condition on the Kyma.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from fleet.models import Module
from fleet.models.manifest_policy import ANY, BUILTIN_SCOPES
from watchers.rendering import NAME, PRIORITY_CLASS_NAME

from .catalog_crds import module_release_meta_crd, module_template_crd
from .kyma_crd import CRD_NAME
from .runtime_kyma import NAMESPACE as KYMA_NAMESPACE  # the runtime watcher's namespace too

ACCESS_NAMESPACE = "kyma-control-plane"
ACCOUNT = "kyma-control-plane"
TOKEN_SECRET = f"{ACCOUNT}-token"
LABELS = {"app.kubernetes.io/name": "kyma-control-plane", "app.kubernetes.io/component": "runtime-access"}
WRITE = ["create", "patch", "update", "delete"]
READ = ["get", "list", "watch"]


def _meta(name: str, namespace: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": dict(LABELS)}
    if namespace:
        meta["namespace"] = namespace
    return meta


def _subject() -> list[dict[str, str]]:
    return [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": ACCESS_NAMESPACE}]


def _named(group: str, resource: str, name: str, verbs: list[str]) -> dict[str, Any]:
    return {"apiGroups": [group], "resources": [resource], "resourceNames": [name], "verbs": verbs}


def owned_crds() -> list[str]:
    """The CRDs the reconciler writes into a runtime: the Kyma's and the catalog mirror's."""
    return [CRD_NAME, *(crd()["metadata"]["name"] for crd in (module_template_crd, module_release_meta_crd))]


def cluster_rules() -> list[dict[str, Any]]:
    """Cluster-wide: only what the control plane owns, by name."""
    return [
        {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"], "verbs": READ},
        {
            "apiGroups": ["apiextensions.k8s.io"],
            "resources": ["customresourcedefinitions"],
            "resourceNames": owned_crds(),
            "verbs": ["create", "patch", "update"],
        },
        _named("", "namespaces", KYMA_NAMESPACE, ["get", "create", "patch"]),
        {"apiGroups": ["scheduling.k8s.io"], "resources": ["priorityclasses"], "verbs": ["list"]},
        _named("scheduling.k8s.io", "priorityclasses", PRIORITY_CLASS_NAME, ["get", *WRITE]),
        {
            "apiGroups": ["admissionregistration.k8s.io"],
            "resources": ["validatingwebhookconfigurations"],
            "verbs": ["list"],
        },
        _named("admissionregistration.k8s.io", "validatingwebhookconfigurations", NAME, ["get", *WRITE]),
    ]


def namespace_rules() -> list[dict[str, Any]]:
    """In a namespace the control plane manages: every namespaced kind (see the module docstring)."""
    return [{"apiGroups": ["*"], "resources": ["*"], "verbs": [*READ, *WRITE]}]


def base_manifests() -> list[dict[str, Any]]:
    """deploy/runtime-access/: the identity, its token, and its rights (see the module docstring)."""
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": _meta(ACCESS_NAMESPACE)},
        {"apiVersion": "v1", "kind": "Namespace", "metadata": _meta(KYMA_NAMESPACE)},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(ACCOUNT, ACCESS_NAMESPACE)},
        {
            # A long-lived token for the Kyma's kubeconfig (the token controller fills it in);
            # rotate it by deleting the Secret and re-applying, then update the kubeconfig.
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "kubernetes.io/service-account-token",
            "metadata": {
                **_meta(TOKEN_SECRET, ACCESS_NAMESPACE),
                "annotations": {"kubernetes.io/service-account.name": ACCOUNT},
            },
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": _meta(ACCOUNT),
            "rules": cluster_rules(),
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": _meta(ACCOUNT),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": ACCOUNT},
            "subjects": _subject(),
        },
        *_namespace_access(ACCOUNT, KYMA_NAMESPACE),
    ]


def _namespace_access(name: str, namespace: str) -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": _meta(name, namespace),
            "rules": namespace_rules(),
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": _meta(name, namespace),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": _subject(),
        },
    ]


def resource_of(kind: str) -> str:
    """The resource (plural) of a kind, as Kubernetes guesses it for kinds it does not know."""
    lower = kind.lower()
    if lower.endswith("s"):
        return f"{lower}es"
    if lower.endswith("y"):
        return f"{lower[:-1]}ies"
    return f"{lower}s"


def module_manifests(modules: Iterable[Module]) -> list[dict[str, Any]]:
    """The extra rights of modules whose policy reaches beyond ``kyma-system`` (may be empty)."""
    docs: list[dict[str, Any]] = []
    for module in sorted(modules, key=lambda m: m.name):
        name = f"{ACCOUNT}-module-{module.name}"
        namespaces = set(module.manifest_namespaces or [module.cr_namespace])
        namespaces.add(module.cr_namespace)
        cluster: list[dict[str, Any]] = []
        if ANY in namespaces:
            # "any namespace": the policy's own choice; every namespaced kind everywhere.
            cluster += [*namespace_rules(), {"apiGroups": [""], "resources": ["namespaces"], "verbs": READ}]
        for namespace in sorted(namespaces - {ANY, KYMA_NAMESPACE}):
            docs.append({"apiVersion": "v1", "kind": "Namespace", "metadata": _meta(namespace)})
            docs += _namespace_access(name, namespace)
        for rule in module.manifest_kinds:
            group, kind = rule.get("group", ""), rule.get("kind", "")
            if BUILTIN_SCOPES.get((group, kind), False) is True:
                continue  # namespaced: covered in the module's namespaces
            resources = ["*"] if kind == ANY else [resource_of(kind)]
            cluster.append({"apiGroups": [group], "resources": resources, "verbs": [*READ, *WRITE]})
        if cluster:
            docs += [
                {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "ClusterRole",
                    "metadata": _meta(name),
                    "rules": cluster,
                },
                {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "ClusterRoleBinding",
                    "metadata": _meta(name),
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
                    "subjects": _subject(),
                },
            ]
    return docs
