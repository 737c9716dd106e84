"""What the control plane may do in a runtime: the RBAC its kubeconfig's identity needs, rendered
from what the reconciler writes there, and an admission guard for what RBAC cannot say. Nothing
like cluster-admin, and no wildcard that reaches past what a reconcile writes.

The **base** (``deploy/runtime-access/``, the same for every runtime, checked against
:func:`base_manifests` by the tests) gives a ServiceAccount ``kyma-control-plane`` in its own
namespace:

- cluster-wide, only the objects it owns, by name: the CRDs of the Kyma and of the catalog's
  mirror (ModuleTemplate, ModuleReleaseMeta), the namespace ``kyma-system`` (get, and create by
  server-side apply, which the API server authorizes as ``patch`` and ``create`` of that name),
  the PriorityClass and the ValidatingWebhookConfiguration of the runtime watcher; plus reading
  CRDs (to learn a module CR's scope) and listing PriorityClasses and webhook configurations
  (one labelled list rechecks several at once);
- in ``kyma-system``, the kinds it writes there, each named (:data:`NAMESPACED_KINDS`): the
  runtime watcher's objects, the runtime's Kyma and the catalog's mirror and the module CRs (API
  group ``operator.kyma-project.io``, where Kyma's modules keep their CRs), and the workload kinds
  modules' manifests hold. Never ``*``: a Role that names every resource in a namespace also
  covers the namespace object itself (Kubernetes authorizes a request for ``namespaces/X`` as one
  inside ``X``), and the subresources that mint other identities' tokens
  (``serviceaccounts/token``) or run commands in pods (``pods/exec``).

RBAC cannot tell an object the control plane created from a user's object of the same kind, nor
refuse a Secret that asks the token controller for another ServiceAccount's token. The **guard**
(:func:`guard_manifests`: a ValidatingAdmissionPolicy and its binding, shipped beside the rules,
matched on the ServiceAccount's user name) refuses the identity

- any write (update, patch, delete) of an object that neither carries the control plane's
  ``managed-by`` label nor lists its field manager (nor upstream's, whose objects it takes over),
  and the creation of an object without that label;
- any update or deletion of the namespaces ``kyma-system`` and ``kyma-control-plane``, whatever
  rules a module adds;
- Secrets of type ``kubernetes.io/service-account-token`` (a way to another account's token).

A module whose manifest policy reaches further (namespaces other than ``kyma-system``,
cluster-scoped kinds, a CR outside ``kyma-system`` or outside ``operator.kyma-project.io``, a
namespaced kind the base does not name) needs **module rules**, rendered from the catalog by
:func:`module_manifests` (``manage.py runtime_access``): a Role per extra namespace and a
ClusterRole for its cluster-scoped kinds, each bound to the same ServiceAccount; the guard holds
for them too. A write outside these rights is refused by the runtime's API server (403) and shown
as a condition on the Kyma.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from fleet.models import Module
from fleet.models.manifest_policy import ANY, BUILTIN_SCOPES
from watchers.rendering import NAME, PRIORITY_CLASS_NAME

from .catalog_crds import module_release_meta_crd, module_template_crd
from .kyma_crd import CRD_NAME, MANAGED_BY_LABEL
from .kyma_crd import GROUP as KYMA_GROUP
from .runtime_kyma import NAMESPACE as KYMA_NAMESPACE  # the runtime watcher's namespace too

ACCESS_NAMESPACE = "kyma-control-plane"
ACCOUNT = "kyma-control-plane"
TOKEN_SECRET = f"{ACCOUNT}-token"
GUARD = f"{ACCOUNT}-guard"
LABELS = {"app.kubernetes.io/name": "kyma-control-plane", "app.kubernetes.io/component": "runtime-access"}
WRITE = ["create", "patch", "update", "delete"]
READ = ["get", "list", "watch"]
# Namespaces the identity may create but never change or delete, whatever rules a module adds.
PROTECTED_NAMESPACES = (KYMA_NAMESPACE, ACCESS_NAMESPACE)
# The ``managed-by`` label values of objects the control plane may change: its own, and
# upstream's lifecycle-manager's, whose objects it takes over (``watchers.rendering``).
OWNER_LABELS = ("kyma", "lifecycle-manager")

# In a namespace the control plane manages: (API group, resources, verbs). The runtime watcher's
# Secret, Services, Deployment and NetworkPolicies; its pods, read for their readiness; the
# runtime's Kyma, the catalog's mirror and the module CRs (and their status), all in Kyma's own API
# group; and the namespaced kinds modules' manifests hold (their operators' workloads).
NAMESPACED_KINDS: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("", ("configmaps", "secrets", "services", "serviceaccounts", "persistentvolumeclaims"), (*READ, *WRITE)),
    ("", ("pods",), tuple(READ)),
    ("apps", ("deployments", "statefulsets", "daemonsets"), (*READ, *WRITE)),
    ("batch", ("jobs", "cronjobs"), (*READ, *WRITE)),
    ("autoscaling", ("horizontalpodautoscalers",), (*READ, *WRITE)),
    ("policy", ("poddisruptionbudgets",), (*READ, *WRITE)),
    ("networking.k8s.io", ("networkpolicies",), (*READ, *WRITE)),
    ("rbac.authorization.k8s.io", ("roles", "rolebindings"), (*READ, *WRITE)),
    (KYMA_GROUP, ("*",), (*READ, *WRITE)),
)


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
        # patch: a server-side apply that creates it is a patch, authorized as create too; the
        # guard refuses it once the namespace exists (the reconciler only ever creates it).
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
    """In a namespace the control plane manages: the kinds it writes there (:data:`NAMESPACED_KINDS`)."""
    return [
        {"apiGroups": [group], "resources": list(resources), "verbs": list(verbs)}
        for group, resources, verbs in NAMESPACED_KINDS
    ]


def _quoted(values: Iterable[str]) -> str:
    return "[" + ", ".join(f"'{value}'" for value in values) + "]"


def guard_manifests(field_manager: str = ACCOUNT) -> list[dict[str, Any]]:
    """The admission guard (see the module docstring): a ValidatingAdmissionPolicy for the
    identity's requests, and its binding. ``field_manager``: ``RUNTIME_FIELD_MANAGER``."""
    user = f"system:serviceaccount:{ACCESS_NAMESPACE}:{ACCOUNT}"
    managers = _quoted(dict.fromkeys((field_manager, *OWNER_LABELS[1:])))
    owned = (
        "oldObject != null && ((has(oldObject.metadata.labels)"
        f" && '{MANAGED_BY_LABEL}' in oldObject.metadata.labels"
        f" && oldObject.metadata.labels['{MANAGED_BY_LABEL}'] in {_quoted(OWNER_LABELS)})"
        " || (has(oldObject.metadata.managedFields)"
        f" && oldObject.metadata.managedFields.exists(f, has(f.manager) && f.manager in {managers})))"
    )
    labelled = (
        f"object != null && has(object.metadata.labels) && '{MANAGED_BY_LABEL}' in object.metadata.labels"
        f" && object.metadata.labels['{MANAGED_BY_LABEL}'] == 'kyma'"
    )
    token_secret = (
        "object != null && request.resource.group == '' && request.resource.resource == 'secrets'"
        " && has(object.type) && object.type == 'kubernetes.io/service-account-token'"
    )
    validations = [
        {
            "expression": f"request.operation != 'CREATE' || ({labelled})",
            "reason": "Forbidden",
            "message": f"the control plane creates only objects labelled {MANAGED_BY_LABEL}=kyma",
        },
        {
            "expression": "request.operation == 'CREATE' || variables.owned",
            "reason": "Forbidden",
            "message": "the control plane changes or deletes only objects it created (label, field manager)",
        },
        {
            "expression": (
                "!(request.resource.group == '' && request.resource.resource == 'namespaces'"
                f" && request.operation != 'CREATE' && request.name in {_quoted(PROTECTED_NAMESPACES)})"
            ),
            "reason": "Forbidden",
            "message": "the control plane never changes or deletes the namespaces it runs in",
        },
        {
            "expression": f"!({token_secret})",
            "reason": "Forbidden",
            "message": "the control plane never writes ServiceAccount token Secrets",
        },
    ]
    return [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": _meta(GUARD),
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "resourceRules": [
                        {
                            "apiGroups": ["*"],
                            "apiVersions": ["*"],
                            "operations": ["CREATE", "UPDATE", "DELETE"],
                            "resources": [
                                "*/*"
                            ],  # every resource and subresource (the API server refuses "*" beside it)
                            "scope": "*",
                        }
                    ]
                },
                "matchConditions": [
                    {"name": "the-control-plane", "expression": f"request.userInfo.username == '{user}'"}
                ],
                "variables": [{"name": "owned", "expression": owned}],
                "validations": validations,
            },
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": _meta(GUARD),
            "spec": {"policyName": GUARD, "validationActions": ["Deny"]},
        },
    ]


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
        *guard_manifests(),
    ]


def _namespace_access(
    name: str, namespace: str, rules: list[dict[str, Any]] | None = None
) -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": _meta(name, namespace),
            "rules": namespace_rules() if rules is None else rules,
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


def _named_by_base(group: str, resource: str) -> bool:
    return any(
        g == group and (resource in resources or "*" in resources) and "create" in verbs
        for g, resources, verbs in NAMESPACED_KINDS
    )


def _module_rules(module: Module, namespace: str) -> list[dict[str, Any]]:
    """What ``module`` needs in one of its namespaces beyond what the base names there."""
    rules = [] if namespace == KYMA_NAMESPACE else namespace_rules()
    wanted = []
    if namespace == module.cr_namespace:
        wanted.append((module.cr_group, [module.cr_plural, f"{module.cr_plural}/status"]))
    for rule in module.manifest_kinds:
        group, kind = rule.get("group", ""), rule.get("kind", "")
        if kind != ANY and BUILTIN_SCOPES.get((group, kind)) is True:
            wanted.append((group, [resource_of(kind)]))
    for group, resources in wanted:
        if not _named_by_base(group, resources[0]):
            rules.append({"apiGroups": [group], "resources": resources, "verbs": [*READ, *WRITE]})
    return rules


def module_manifests(modules: Iterable[Module]) -> list[dict[str, Any]]:
    """The extra rights of modules whose policy reaches beyond what the base names (may be empty):
    namespaces other than ``kyma-system``, a CR outside Kyma's API group, namespaced kinds the
    base does not name, cluster-scoped (or unknown) kinds. The guard holds for all of them."""
    docs: list[dict[str, Any]] = []
    for module in sorted(modules, key=lambda m: m.name):
        name = f"{ACCOUNT}-module-{module.name}"
        namespaces = set(module.manifest_namespaces or [module.cr_namespace])
        namespaces.add(module.cr_namespace)
        cluster: list[dict[str, Any]] = []
        if ANY in namespaces:
            # "any namespace": the policy's own choice; its kinds in every namespace.
            cluster += [*namespace_rules(), {"apiGroups": [""], "resources": ["namespaces"], "verbs": READ}]
        for namespace in sorted(namespaces - {ANY}):
            rules = _module_rules(module, namespace)
            if not rules:
                continue
            if namespace != KYMA_NAMESPACE:
                docs.append({"apiVersion": "v1", "kind": "Namespace", "metadata": _meta(namespace)})
            docs += _namespace_access(name, namespace, rules)
        for rule in module.manifest_kinds:
            group, kind = rule.get("group", ""), rule.get("kind", "")
            if kind != ANY and BUILTIN_SCOPES.get((group, kind)) is True:
                continue  # namespaced: in the module's namespaces (above)
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
