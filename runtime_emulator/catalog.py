"""Which resources an emulated API server serves, and how it describes them in discovery.

The built-in resources are one immutable, module-level table shared by every emulator (thousands
of runtimes must not each carry their own copy); only resources added by CustomResourceDefinitions
live in a per-emulator overlay, created on the first CRD.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from runtime_emulator import errors

ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
NO_COLLECTION_DELETE = ("create", "delete", "get", "list", "patch", "update", "watch")
SUBRESOURCE_VERBS = ("get", "patch", "update")
ALWAYS_SELECTABLE = ("metadata.name", "metadata.namespace")


@dataclass(frozen=True, slots=True)
class ResourceType:
    """One group/version/plural the server serves, with what discovery says about it."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    singular: str = ""
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ()
    verbs: tuple[str, ...] = ALL_VERBS
    # Real servers set metadata.generation only on some kinds (never on Secrets or ConfigMaps).
    generation: bool = False
    # Extra field selectors beyond metadata.name/namespace (e.g. status.phase on pods).
    field_labels: tuple[str, ...] = ()
    # DELETE answers with the object (pods, namespaces, custom resources) instead of a Status.
    returns_deleted: bool = False
    builtin: bool = True
    # A custom resource's openAPIV3Schema as JSON text ("": none); see runtime_emulator.schemas.
    schema: str = ""

    @property
    def api_version(self) -> str:
        """``group/version``, or just ``v1`` for the core group."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def storage(self) -> str:
        """Version-independent key: all served versions of a CRD share one set of objects."""
        return errors.qualified(self.plural, self.group)

    @property
    def has_status(self) -> bool:
        """Whether ``status`` is only writable through the ``/status`` subresource."""
        return "status" in self.subresources

    @property
    def list_kind(self) -> str:
        """The ``kind`` of list responses."""
        return f"{self.kind}List"

    def selectable(self, field: str) -> bool:
        """Whether a field selector may use ``field`` (unknown fields are a 400, as on a real server)."""
        return field in ALWAYS_SELECTABLE or field in self.field_labels

    def discovery_entries(self) -> list[dict[str, Any]]:
        """The APIResourceList entries: the resource and each subresource."""
        entry: dict[str, Any] = {
            "name": self.plural,
            "singularName": self.singular or self.kind.lower(),
            "namespaced": self.namespaced,
            "kind": self.kind,
            "verbs": list(self.verbs),
        }
        if self.short_names:
            entry["shortNames"] = list(self.short_names)
        if self.categories:
            entry["categories"] = list(self.categories)
        entries = [entry]
        for sub in self.subresources:
            entries.append(
                {
                    "name": f"{self.plural}/{sub}",
                    "singularName": "",
                    "namespaced": self.namespaced,
                    "kind": self.kind,
                    "verbs": list(SUBRESOURCE_VERBS),
                }
            )
        return entries


_POD_FIELDS = (
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "status.phase",
    "status.podIP",
)
_EVENT_FIELDS = (
    *(
        f"involvedObject.{field}"
        for field in ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")
    ),
    "reason",
    "reportingComponent",
    "type",
)


def _builtin(
    path: str,
    kind: str,
    namespaced: bool,
    *,
    short: str = "",
    categories: str = "",
    status: bool = False,
    collection_delete: bool = True,
    generation: bool = False,
    fields: tuple[str, ...] = (),
    returns_deleted: bool = False,
) -> ResourceType:
    group_version, _, plural = path.rpartition("/")
    group, _, version = group_version.rpartition("/")
    return ResourceType(
        group,
        version,
        plural,
        kind,
        namespaced,
        singular=kind.lower(),
        short_names=tuple(short.split()),
        categories=tuple(categories.split()),
        subresources=("status",) if status else (),
        verbs=ALL_VERBS if collection_delete else NO_COLLECTION_DELETE,
        generation=generation,
        field_labels=fields,
        returns_deleted=returns_deleted,
    )


_WEBHOOKS = "admissionregistration.k8s.io/v1"
_RBAC = "rbac.authorization.k8s.io/v1"
BUILTINS: tuple[ResourceType, ...] = (
    _builtin(
        "v1/namespaces", "Namespace", False, short="ns", status=True, collection_delete=False,
        fields=("status.phase",), returns_deleted=True,
    ),
    _builtin("v1/secrets", "Secret", True, fields=("type",)),
    _builtin("v1/configmaps", "ConfigMap", True, short="cm"),
    _builtin(
        "v1/services", "Service", True, short="svc", categories="all", status=True, collection_delete=False
    ),
    _builtin("v1/serviceaccounts", "ServiceAccount", True, short="sa"),
    _builtin(
        "v1/pods", "Pod", True, short="po", categories="all", status=True,
        fields=_POD_FIELDS, returns_deleted=True,
    ),
    _builtin("v1/events", "Event", True, short="ev", fields=_EVENT_FIELDS),
    _builtin(
        "apps/v1/deployments", "Deployment", True, short="deploy", categories="all", status=True,
        generation=True,
    ),
    _builtin(
        f"{_WEBHOOKS}/validatingwebhookconfigurations", "ValidatingWebhookConfiguration", False,
        categories="api-extensions", generation=True,
    ),
    _builtin(
        f"{_WEBHOOKS}/mutatingwebhookconfigurations", "MutatingWebhookConfiguration", False,
        categories="api-extensions", generation=True,
    ),
    _builtin(
        "apiextensions.k8s.io/v1/customresourcedefinitions", "CustomResourceDefinition", False,
        short="crd crds", categories="api-extensions", status=True, generation=True,
    ),
    _builtin(f"{_RBAC}/roles", "Role", True),
    _builtin(f"{_RBAC}/rolebindings", "RoleBinding", True),
    _builtin(f"{_RBAC}/clusterroles", "ClusterRole", False),
    _builtin(f"{_RBAC}/clusterrolebindings", "ClusterRoleBinding", False),
    _builtin("networking.k8s.io/v1/networkpolicies", "NetworkPolicy", True, short="netpol", generation=True),
    _builtin("scheduling.k8s.io/v1/priorityclasses", "PriorityClass", False, short="pc"),
)  # fmt: skip
_BUILTIN_INDEX: dict[tuple[str, str, str], ResourceType] = {
    (r.group, r.version, r.plural): r for r in BUILTINS
}

NAMESPACES = _BUILTIN_INDEX["", "v1", "namespaces"]
PODS = _BUILTIN_INDEX["", "v1", "pods"]
SECRETS = _BUILTIN_INDEX["", "v1", "secrets"]
CONFIGMAPS = _BUILTIN_INDEX["", "v1", "configmaps"]
SERVICES = _BUILTIN_INDEX["", "v1", "services"]
DEPLOYMENTS = _BUILTIN_INDEX["apps", "v1", "deployments"]
CRDS = _BUILTIN_INDEX["apiextensions.k8s.io", "v1", "customresourcedefinitions"]
VALIDATING_WEBHOOKS = _BUILTIN_INDEX["admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations"]
MUTATING_WEBHOOKS = _BUILTIN_INDEX["admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations"]
PRIORITY_CLASSES = _BUILTIN_INDEX["scheduling.k8s.io", "v1", "priorityclasses"]

_VERSION = re.compile(r"^v(\d+)(?:(alpha|beta)(\d+))?$")


def version_priority(version: str) -> tuple[int, int, int, str]:
    """Sort key putting versions in Kubernetes preference order: v2 > v1 > v1beta2 > v1alpha1 > others."""
    match = _VERSION.match(version)
    if not match:
        return (3, 0, 0, version)
    major, level, minor = match.groups()
    rank = {None: 0, "beta": 1, "alpha": 2}[level]
    return (rank, -int(major), -int(minor or 0), version)


@functools.lru_cache(maxsize=4096)
def _custom_type(
    group: str,
    version: str,
    names: tuple[str, str, str, tuple[str, ...], tuple[str, ...]],
    namespaced: bool,
    status: bool,
    schema: str,
) -> ResourceType:
    # Interned: thousands of runtimes registering the same CRD share the same few objects.
    plural, singular, kind, short_names, categories = names
    return ResourceType(
        group,
        version,
        plural,
        kind,
        namespaced,
        singular,
        short_names,
        categories,
        ("status",) if status else (),
        generation=True,  # (and DELETE answers a Status, as for ConfigMaps, once one is gone)
        builtin=False,
        schema=schema,
    )


def types_from_crd(crd: Mapping[str, Any]) -> list[ResourceType]:
    """The resource types a CustomResourceDefinition serves (one per served version)."""
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    group, plural, kind = spec.get("group", ""), names.get("plural", ""), names.get("kind", "")
    name = (crd.get("metadata") or {}).get("name", "")
    if not group or not plural or not kind:
        raise errors.invalid(
            "CustomResourceDefinition",
            "apiextensions.k8s.io",
            name,
            "spec",
            "group, names.plural and names.kind are required",
        )
    if name != f"{plural}.{group}":
        raise errors.invalid(
            "CustomResourceDefinition",
            "apiextensions.k8s.io",
            name,
            "metadata.name",
            'must be spec.names.plural+"."+spec.group',
        )
    scope = spec.get("scope", "Namespaced")
    names_key = (
        plural,
        names.get("singular") or kind.lower(),
        kind,
        tuple(names.get("shortNames") or ()),
        tuple(names.get("categories") or ()),
    )
    versions = [v for v in spec.get("versions") or () if v.get("served", True)]
    if not versions:
        raise errors.invalid(
            "CustomResourceDefinition",
            "apiextensions.k8s.io",
            name,
            "spec.versions",
            "must have at least one served version",
        )
    return [
        _custom_type(
            group,
            v["name"],
            names_key,
            scope == "Namespaced",
            "status" in (v.get("subresources") or {}),
            _schema_text(v),
        )
        for v in versions
    ]


def _schema_text(version: Mapping[str, Any]) -> str:
    """A version's schema as canonical text (which types are the same: :func:`_custom_type`)."""
    schema = (version.get("schema") or {}).get("openAPIV3Schema")
    if not isinstance(schema, Mapping):
        return ""
    known = _SCHEMA_TEXTS.get(id(schema))
    if known is not None and known[0] is schema:
        return known[1]
    text = json.dumps(schema, sort_keys=True, separators=(",", ":"))
    if len(_SCHEMA_TEXTS) >= 64:
        _SCHEMA_TEXTS.clear()
    _SCHEMA_TEXTS[id(schema)] = (schema, text)
    return text


# The text of the schemas seen last, by the schema object (kept alive here, so its id stays its
# own): a CRD's write validates its versions, then registers them, from the same stored object;
# encoding its schema once instead of twice was 5 % of the emulated runtimes' CPU in a first
# reconcile (bench/fleet.py, py-spy). Stored objects are never changed in place.
_SCHEMA_TEXTS: dict[int, tuple[Mapping[str, Any], str]] = {}


class Catalog:
    """The built-in resources plus the custom ones this emulator's CRDs added."""

    __slots__ = ("_custom",)

    def __init__(self) -> None:
        self._custom: dict[tuple[str, str, str], ResourceType] | None = None

    def lookup(self, group: str, version: str, plural: str) -> ResourceType | None:
        """The type served at a group/version/plural, or ``None`` (404)."""
        key = (group, version, plural)
        found = _BUILTIN_INDEX.get(key)
        if found is None and self._custom is not None:
            found = self._custom.get(key)
        return found

    def __iter__(self) -> Iterator[ResourceType]:
        yield from BUILTINS
        if self._custom:
            yield from self._custom.values()

    def register(self, types: list[ResourceType]) -> None:
        """Serve the versions of one CRD (replacing whatever that CRD served before)."""
        if types:
            self.unregister(types[0].group, types[0].plural)
        custom = self._custom if self._custom is not None else {}
        for rtype in types:
            custom[rtype.group, rtype.version, rtype.plural] = rtype
        self._custom = custom

    def unregister(self, group: str, plural: str) -> None:
        """Stop serving every version of one CRD's resource."""
        if self._custom:
            for key in [k for k in self._custom if k[0] == group and k[2] == plural]:
                del self._custom[key]

    def resolve(self, spec: str) -> ResourceType:
        """Find a type by ``group/version/plural``, ``v1/plural``, ``plural[.group]`` or ``Kind``."""
        parts = spec.split("/")
        if len(parts) == 3:
            found = self.lookup(*parts)
        elif len(parts) == 2:
            found = self.lookup("", parts[0], parts[1])
        else:
            candidates = [
                r for r in self if spec in (r.plural, r.storage, r.kind, r.singular, *r.short_names)
            ]
            candidates.sort(key=lambda r: version_priority(r.version))
            found = candidates[0] if candidates else None
        if found is None:
            raise LookupError(f"unknown resource {spec!r}")
        return found

    def for_object(self, obj: Mapping[str, Any]) -> ResourceType:
        """The type serving an object's apiVersion and kind."""
        api_version, kind = obj.get("apiVersion", ""), obj.get("kind", "")
        group, _, version = api_version.rpartition("/")
        for rtype in self:
            if rtype.group == group and rtype.version == version and rtype.kind == kind:
                return rtype
        raise LookupError(f"no resource serves {api_version} {kind}")

    def group_versions(self) -> dict[str, list[str]]:
        """Group → served versions, preferred first (the core group is left out, as in /apis)."""
        groups: dict[str, set[str]] = {}
        for rtype in self:
            if rtype.group:
                groups.setdefault(rtype.group, set()).add(rtype.version)
        return {group: sorted(versions, key=version_priority) for group, versions in groups.items()}

    def in_group_version(self, group: str, version: str) -> list[ResourceType]:
        """The types of one group version, for its APIResourceList."""
        return [r for r in self if r.group == group and r.version == version]
