"""What a real API server knows of each kind's fields: their types, which maps and lists are atomic,
and which lists are keyed (``x-kubernetes-list-type: map``).

Server-side apply, pruning, defaulting and CRD validation all walk an object alongside its schema.
For built-in kinds the schema is Kubernetes' own OpenAPI, as ``kubernetes-validate`` ships it
(strict: every struct lists its fields) for the version the real test tier runs; for a custom
resource it is the CRD version's ``openAPIV3Schema``, with the object's ``apiVersion``, ``kind`` and
``metadata`` (an ObjectMeta) added at its root. The definitions are read once per process, on
first use, and compiled node by node only as objects reach them, so thousands of emulators share
them and a kind nobody writes costs nothing.

A :class:`Node` with no type is "anything" (``x-kubernetes-preserve-unknown-fields``, a ``JSON``
field, or no schema at all): there a map is a granular map and a list is atomic, which is what a
real server deduces for fields it has no schema for.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from importlib import resources
from typing import Any

SCHEMA_VERSION = "v1.37.0"  # the Kubernetes release of envtest/build (the real test tier)
OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
# Defaults of list-map key fields, which the published schemas leave out; a real server keys list
# items by them (a container port applied without a protocol is ``protocol: TCP``).
KEY_DEFAULTS = {
    "io.k8s.api.core.v1.ContainerPort": {"protocol": "TCP"},
    "io.k8s.api.core.v1.ServicePort": {"protocol": "TCP"},
    "io.k8s.api.core.v1.EndpointPort": {"protocol": "TCP"},
}
SCALARS = ("string", "integer", "number", "boolean")


class Node:
    """One schema node, its references resolved; children are compiled when first asked for."""

    __slots__ = (
        "_children",
        "_compiler",
        "_items",
        "additional",
        "atomic_map",
        "crd",
        "embedded",
        "key_defaults",
        "list_keys",
        "list_type",
        "nullable",
        "preserve",
        "properties",
        "raw",
        "types",
    )

    def __init__(self, raw: Mapping[str, Any], compiler: Compiler, crd: bool, name: str = "") -> None:
        self.raw = raw
        self.crd = crd
        self._compiler = compiler
        self._children: dict[str, Node | None] = {}
        self._items: Node | None = None
        types = raw.get("type")
        names = {types} if isinstance(types, str) else set(types or ())
        for option in raw.get("oneOf") or () if not crd else ():  # IntOrString, Quantity
            option_type = option.get("type")
            names |= {option_type} if isinstance(option_type, str) else set(option_type or ())
        if raw.get("x-kubernetes-int-or-string"):
            names |= {"integer", "string"}
        self.nullable = "null" in names or bool(raw.get("nullable"))
        names.discard("null")
        if "number" in names:
            names.add("integer")  # an integer is a number
        self.types = frozenset(names)
        self.properties: Mapping[str, Any] = raw.get("properties") or {}
        additional = raw.get("additionalProperties")
        self.preserve = bool(raw.get("x-kubernetes-preserve-unknown-fields"))
        if isinstance(additional, Mapping):
            self.additional: Mapping[str, Any] | bool = additional
        elif additional is True or self.preserve:
            self.additional = True
        elif additional is None and not crd and not self.properties:
            self.additional = True  # a built-in object with no fields listed: free-form
        else:
            self.additional = False
        self.atomic_map = raw.get("x-kubernetes-map-type") == "atomic"
        self.list_type = raw.get("x-kubernetes-list-type") or "atomic"
        self.list_keys: tuple[str, ...] = tuple(raw.get("x-kubernetes-list-map-keys") or ())
        self.embedded = bool(raw.get("x-kubernetes-embedded-resource"))
        self.key_defaults: Mapping[str, Any] = KEY_DEFAULTS.get(name, {})

    @property
    def anything(self) -> bool:
        return not self.types

    def is_object(self) -> bool:
        return "object" in self.types

    def child(self, key: str) -> Node | None:
        """The schema of field ``key`` (``None``: the field is not declared here)."""
        if key in self._children:
            return self._children[key]
        if self.anything:
            found: Node | None = ANY
        elif key in self.properties:
            found = self._compiler.node(self.properties[key], self.crd)
        elif self.embedded and key in ("apiVersion", "kind", "metadata"):
            found = self._compiler.embedded_field(key, self.crd)
        elif isinstance(self.additional, Mapping):
            found = self._compiler.node(self.additional, self.crd)
        elif self.additional:
            found = ANY
        else:
            found = None
        self._children[key] = found
        return found

    def items(self) -> Node:
        if self._items is None:
            raw = self.raw.get("items")
            self._items = self._compiler.node(raw, self.crd) if isinstance(raw, Mapping) else ANY
        return self._items


class Compiler:
    """Compiles raw schema dicts to nodes, once each (keyed by the dict's identity)."""

    def __init__(self, definitions: Mapping[str, Any]) -> None:
        self.definitions = definitions
        self._nodes: dict[int, Node] = {}
        self._keep: list[Mapping[str, Any]] = []  # the raw dicts ids are taken of

    def node(self, raw: Mapping[str, Any], crd: bool) -> Node:
        name = ""
        while "$ref" in raw:
            name = raw["$ref"].rsplit("/", 1)[-1]
            raw = self.definitions[name]
            crd = False  # a built-in type (ObjectMeta) inside a custom resource keeps its rules
        key = id(raw) * 2 + crd
        found = self._nodes.get(key)
        if found is None:
            found = self._nodes[key] = Node(raw, self, crd, name)
            self._keep.append(raw)
        return found

    def embedded_field(self, key: str, crd: bool) -> Node:
        if key == "metadata":
            return self.node({"$ref": f"#/$defs/{OBJECT_META}"}, False)
        return self.node(_STRING, crd)


_STRING = {"type": "string"}
ANY = Node({}, None, False)  # type: ignore[arg-type]  # no children to compile: it has no schema


@functools.cache
def _definitions() -> dict[str, Any]:
    folder = (
        resources.files("kubernetes_validate") / "kubernetes-json-schema" / f"{SCHEMA_VERSION}-local-strict"
    )
    return json.loads((folder / "_definitions.json").read_text())["$defs"]


@functools.cache
def _compiler() -> Compiler:
    return Compiler(_definitions())


@functools.cache
def _builtin_index() -> dict[tuple[str, str, str], str]:
    index = {}
    for name, definition in _definitions().items():
        for gvk in definition.get("x-kubernetes-group-version-kind") or ():
            index[gvk.get("group", ""), gvk.get("version", ""), gvk.get("kind", "")] = name
    return index


@functools.cache
def builtin_groups() -> frozenset[str]:
    """The API groups a real server serves itself (the core group is ``""``)."""
    return frozenset(group for group, _, _ in _builtin_index())


@functools.cache
def builtin(group: str, version: str, kind: str) -> Node | None:
    """The schema of a built-in kind (``None`` when Kubernetes does not publish one)."""
    name = _builtin_index().get((group, version, kind))
    return None if name is None else _compiler().node({"$ref": f"#/$defs/{name}"}, False)


@functools.lru_cache(maxsize=256)
def custom(schema_json: str) -> Node:
    """A custom resource's root: its CRD version's schema plus ``apiVersion``, ``kind`` and an
    ObjectMeta ``metadata``. Keyed by the schema's JSON text, so emulators share it."""
    raw = (
        json.loads(schema_json)
        if schema_json
        else {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    )
    properties = dict(raw.get("properties") or {})
    properties["apiVersion"] = properties["kind"] = _STRING
    properties["metadata"] = {"$ref": f"#/$defs/{OBJECT_META}"}
    root = {**raw, "type": "object", "properties": properties}
    compiler = _compiler()
    compiler._keep.append(root)
    return compiler.node(root, True)
