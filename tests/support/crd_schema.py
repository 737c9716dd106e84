"""A CRD's schema as a Kubernetes API server applies it: structural pruning, then validation.

``pruned(document, schema)`` lists every field the API server would silently drop (a property
not declared where neither ``additionalProperties`` nor ``x-kubernetes-preserve-unknown-fields``
keeps it); ``violations(document, schema)`` lists what its validation would refuse. A document
that "validates against upstream's CRD" must have neither.
"""

from __future__ import annotations

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
