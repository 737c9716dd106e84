"""A CRD's schema as a Kubernetes API server applies it: structural pruning, then validation.

``pruned(document, schema)`` lists every field the API server would silently drop (a property
not declared where neither ``additionalProperties`` nor ``x-kubernetes-preserve-unknown-fields``
keeps it); ``violations(document, schema)`` lists what its validation would refuse. A document
that "validates against upstream's CRD" must have neither.
"""

from __future__ import annotations

from copy import deepcopy
from pathlib import Path
from typing import Any

import jsonschema
import yaml

UPSTREAM = Path("/work/shared/upstream")
UPSTREAM_KYMA_CRD = UPSTREAM / "crds" / "operator.kyma-project.io_kymas.yaml"
# The object's own fields at the root (and in embedded resources) are the API server's, not the schema's.
_OBJECT_FIELDS = ("apiVersion", "kind", "metadata")


def crd_schema(crd: dict[str, Any], version: str = "v1beta2") -> dict[str, Any]:
    """The ``openAPIV3Schema`` of one version of a CRD."""
    [entry] = [v for v in crd["spec"]["versions"] if v["name"] == version]
    return entry["schema"]["openAPIV3Schema"]


def upstream_kyma_schema() -> dict[str, Any]:
    return crd_schema(yaml.safe_load(UPSTREAM_KYMA_CRD.read_text()))


def pruned(value: Any, schema: dict[str, Any], path: str = "", *, root: bool = True) -> list[str]:
    """Paths of the fields structural pruning would remove from ``value``."""
    found: list[str] = []
    if isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, dict):
            for index, item in enumerate(value):
                found += pruned(item, items, f"{path}[{index}]", root=False)
        return found
    if not isinstance(value, dict):
        return found
    properties = schema.get("properties") or {}
    additional = schema.get("additionalProperties")
    keep_unknown = schema.get("x-kubernetes-preserve-unknown-fields") is True or additional is True
    embedded = root or schema.get("x-kubernetes-embedded-resource") is True
    for key, item in value.items():
        where = f"{path}.{key}" if path else key
        if embedded and key in _OBJECT_FIELDS and key not in properties:
            continue
        if root and key == "metadata":
            continue  # ObjectMeta: the API server's own, whatever the schema says
        if key in properties:
            found += pruned(item, properties[key], where, root=False)
        elif isinstance(additional, dict):
            found += pruned(item, additional, where, root=False)
        elif not keep_unknown:
            found.append(where)
    return found


def violations(value: Any, schema: dict[str, Any]) -> list[str]:
    """What the schema's validation refuses (``x-kubernetes-*`` keys are ignored by jsonschema)."""
    validator = jsonschema.Draft7Validator(schema, format_checker=jsonschema.FormatChecker())
    return [
        f"{'.'.join(str(p) for p in error.absolute_path) or '<root>'}: {error.message}"
        for error in validator.iter_errors(value)
    ]


def assert_fits(document: dict[str, Any], schema: dict[str, Any]) -> None:
    """Nothing pruned, nothing refused."""
    dropped = pruned(document, schema)
    assert not dropped, f"the API server would prune: {dropped}"
    refused = violations(document, schema)
    assert not refused, f"the API server would refuse: {refused}"


def defaulted(value: Any, schema: dict[str, Any]) -> Any:
    """``value`` with the schema's ``default``s filled in, as an API server does before validating."""
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [defaulted(item, schema["items"]) for item in value]
    if not isinstance(value, dict):
        return value
    result = dict(value)
    for key, sub in (schema.get("properties") or {}).items():
        if key not in result and "default" in sub:
            result[key] = deepcopy(sub["default"])
        if key in result:
            result[key] = defaulted(result[key], sub)
    return result


def duplicate_keys(value: Any, schema: dict[str, Any], path: str = "") -> list[str]:
    """Entries of ``x-kubernetes-list-type: map`` lists whose keys repeat (the API server refuses them)."""
    found: list[str] = []
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        if schema.get("x-kubernetes-list-type") == "map":
            keys = schema.get("x-kubernetes-list-map-keys") or []
            seen = set()
            for index, item in enumerate(value):
                key = tuple(item.get(k) for k in keys) if isinstance(item, dict) else None
                if key in seen:
                    found.append(f"{path}[{index}]: duplicate entry {key}")
                seen.add(key)
        for index, item in enumerate(value):
            found += duplicate_keys(item, schema["items"], f"{path}[{index}]")
    elif isinstance(value, dict):
        for key, sub in (schema.get("properties") or {}).items():
            if key in value:
                found += duplicate_keys(value[key], sub, f"{path}.{key}" if path else key)
    return found


def outcome(document: dict[str, Any], schema: dict[str, Any]) -> tuple[list[str], list[str]]:
    """What an API server does with ``document``: the fields it prunes, what it refuses after defaulting."""
    complete = defaulted(document, schema)
    return pruned(document, schema), violations(complete, schema) + duplicate_keys(complete, schema)


# Keywords a CRD's schema may not use, and those a structural schema forbids inside allOf/anyOf/oneOf/not.
_FORBIDDEN = {"$ref", "definitions", "dependencies", "patternProperties", "additionalItems", "const", "id"}
_NOT_IN_JUNCTORS = {"type", "additionalProperties", "default", "nullable", "description", "title"}
_JUNCTORS = ("allOf", "anyOf", "oneOf")


def structural_problems(schema: dict[str, Any], path: str = "", *, in_junctor: bool = False) -> list[str]:
    """Where ``schema`` breaks Kubernetes' rules for a structural CRD schema (the ones our schemas can
    break): a node without a type, additionalProperties beside properties, uniqueItems, unknown
    keywords, types or defaults inside a logical junctor, list-map keys neither required nor defaulted."""
    where = path or "<root>"
    found = [f"{where}: {key} is not allowed" for key in sorted(_FORBIDDEN & schema.keys())]
    if schema.get("uniqueItems"):
        found.append(f"{where}: uniqueItems is not allowed")
    if in_junctor:
        found += [f"{where}: {key} inside a junctor" for key in sorted(_NOT_IN_JUNCTORS & schema.keys())]
        found += [f"{where}: {key} inside a junctor" for key in schema if key.startswith("x-kubernetes-")]
    elif "type" not in schema and not (
        schema.get("x-kubernetes-preserve-unknown-fields") or schema.get("x-kubernetes-int-or-string")
    ):
        found.append(f"{where}: no type")
    if "properties" in schema and "additionalProperties" in schema:
        found.append(f"{where}: additionalProperties beside properties")
    if isinstance(schema.get("additionalProperties"), bool):
        found.append(f"{where}: additionalProperties must be a schema")
    for name, sub in (schema.get("properties") or {}).items():
        found += structural_problems(sub, f"{path}.{name}", in_junctor=in_junctor)
    if "items" in schema:
        items = schema["items"]
        if not isinstance(items, dict):
            found.append(f"{where}: items must be one schema")
        else:
            found += structural_problems(items, f"{path}[]", in_junctor=in_junctor)
            for key in schema.get("x-kubernetes-list-map-keys") or ():
                prop = (items.get("properties") or {}).get(key, {})
                if key not in (items.get("required") or ()) and "default" not in prop:
                    found.append(f"{where}: list-map key {key} is neither required nor defaulted")
    if "not" in schema:
        found += structural_problems(schema["not"], f"{path}(not)", in_junctor=True)
    for junctor in _JUNCTORS:
        for index, sub in enumerate(schema.get(junctor) or ()):
            found += structural_problems(sub, f"{path}({junctor}[{index}])", in_junctor=True)
    return found
