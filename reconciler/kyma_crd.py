"""The Kyma CustomResourceDefinition the control plane installs in each runtime, written from our own
schemas so the runtime's API server refuses a bad edit of ``kyma-system/default`` at once.

Its ``spec`` is the control plane's own Kyma spec schema (``fleet.models.kyma``), translated to the
structural OpenAPI v3 subset a CRD accepts; it has the fields and types of upstream's v1beta2 Kyma,
with upstream's defaults (``MODULE_DEFAULTS``) and module names unique (a list map keyed by name).
Where our rules are stricter than upstream's (the reserved channel ``none``, module names that are
DNS labels) the runtime refuses what the control plane would refuse when adopting the edit anyway.
Its ``status`` declares every field of upstream's Kyma status, so a status written by upstream's
lifecycle-manager before a migration is kept as it is, and the one we mirror is never pruned.
Only v1beta2 is served, as before.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fleet.models.kyma import CHANNEL_SCHEMA, MODULE_DEFAULTS, MODULE_SCHEMA, KymaState
from kernel.documents import schema

GROUP = "operator.kyma-project.io"
VERSION = "v1beta2"
KIND = "Kyma"
PLURAL = "kymas"
CRD_NAME = f"{PLURAL}.{GROUP}"
MANAGED_BY_LABEL = "operator.kyma-project.io/managed-by"

# JSON-Schema keywords a CRD's schema also knows; anything else in our schemas is refused, never dropped.
_KEPT = frozenset(
    {
        "type",
        "properties",
        "items",
        "required",
        "enum",
        "pattern",
        "minLength",
        "maxLength",
        "minimum",
        "maximum",
        "minItems",
        "maxItems",
        "format",
        "default",
        "nullable",
        "not",
        "allOf",
        "anyOf",
        "oneOf",
    }
)
_JUNCTORS = ("not", "allOf", "anyOf", "oneOf")


def structural(json_schema: Mapping[str, Any]) -> dict[str, Any]:
    """``json_schema`` as a CRD's structural schema, validating the same documents.

    ``additionalProperties: false`` goes: an API server prunes unknown fields instead of refusing
    them. ``const`` becomes a one-value ``enum`` and a type union with ``null`` becomes ``nullable``.
    A keyword a CRD cannot express raises ``ValueError`` rather than silently loosening the check.
    """
    result: dict[str, Any] = {}
    for key, value in json_schema.items():
        if key == "additionalProperties":
            if value is False:
                continue
            if isinstance(value, Mapping) and "properties" not in json_schema:
                result[key] = structural(value)
                continue
            raise ValueError(f"additionalProperties {value!r} has no structural equivalent here")
        if key == "const":
            result["enum"] = [value]
        elif key == "type" and isinstance(value, list):
            types = [t for t in value if t != "null"]
            if len(types) != 1:
                raise ValueError(f"type {value!r} has no structural equivalent")
            result["type"] = types[0]
            if "null" in value:
                result["nullable"] = True
        elif key == "properties":
            result[key] = {name: structural(sub) for name, sub in value.items()}
        elif key in ("items", "not"):
            result[key] = structural(value)
        elif key in _JUNCTORS:
            result[key] = [structural(sub) for sub in value]
        elif key in _KEPT or key.startswith("x-kubernetes-"):
            result[key] = value
        else:
            raise ValueError(f"the keyword {key!r} cannot be expressed in a CRD schema")
    return result


def _module() -> dict[str, Any]:
    module = structural(MODULE_SCHEMA)
    for key, value in MODULE_DEFAULTS.items():
        module["properties"][key] = {**module["properties"][key], "default": value}
    # Defaulted fields are always there once the API server has defaulted the object.
    module["required"] = [*module["required"], *(k for k in MODULE_DEFAULTS if k not in module["required"])]
    return module


def spec_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["channel"],
        "properties": {
            "channel": structural(CHANNEL_SCHEMA),
            "modules": {
                "type": "array",
                "items": _module(),
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["name"],
            },
            "skipMaintenanceWindows": schema.BOOLEAN,
        },
    }


_INT64 = {"type": "integer", "format": "int64"}
_TIME = {"type": "string", "format": "date-time"}
# Kubernetes' own condition (metav1.Condition) rules.
_CONDITION_TYPE = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
)
_CONDITION_REASON = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"
_CONDITION = {
    "type": "object",
    "required": ["type", "status", "lastTransitionTime", "reason", "message"],
    "properties": {
        "type": schema.string(pattern=_CONDITION_TYPE, max_length=316),
        "status": schema.enum("True", "False", "Unknown"),
        "observedGeneration": {**_INT64, "minimum": 0},
        "lastTransitionTime": _TIME,
        "reason": schema.string(pattern=_CONDITION_REASON, min_length=1, max_length=1024),
        "message": schema.string(max_length=32768),
    },
}
# Our states, and upstream's Unmanaged (a status written by upstream before a migration may carry it).
_STATE = schema.enum(*KymaState.values, "Unmanaged")
# What status.modules[] points at: apiVersion, kind and the identifying part of the metadata.
_OBJECT_REFERENCE = {
    "type": "object",
    "properties": {
        "apiVersion": schema.STRING,
        "kind": schema.STRING,
        "metadata": {
            "type": "object",
            "properties": {"name": schema.STRING, "namespace": schema.STRING, "generation": _INT64},
        },
    },
}
_MODULE_STATUS = {
    "type": "object",
    "required": ["name", "state"],
    "properties": {
        "name": schema.STRING,
        "state": _STATE,
        "channel": schema.STRING,
        "version": schema.STRING,
        "message": schema.STRING,
        "fqdn": schema.STRING,
        "ocmComponentName": schema.STRING,
        # No default: the API server would add it to what we mirror, and the next mirror would differ.
        "maintenance": schema.BOOLEAN,
        "resource": _OBJECT_REFERENCE,
        "manifest": _OBJECT_REFERENCE,
        "template": _OBJECT_REFERENCE,
    },
}


def status_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "state": _STATE,
            "activeChannel": schema.STRING,
            "conditions": {
                "type": "array",
                "items": _CONDITION,
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["type"],
            },
            "lastOperation": {
                "type": "object",
                "required": ["operation"],
                "properties": {"operation": schema.STRING, "lastUpdateTime": _TIME},
            },
            "modules": {"type": "array", "items": _MODULE_STATUS},
        },
    }


def open_api_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "apiVersion": schema.STRING,
            "kind": schema.STRING,
            "metadata": {"type": "object"},
            "spec": spec_schema(),
            "status": status_schema(),
        },
    }


def kyma_crd() -> dict[str, Any]:
    """The CRD (unstamped): Kyma, namespaced, v1beta2 served and stored, with a status subresource."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": CRD_NAME, "labels": {MANAGED_BY_LABEL: "kyma"}},
        "spec": {
            "group": GROUP,
            "names": {"kind": KIND, "listKind": f"{KIND}List", "plural": PLURAL, "singular": "kyma"},
            "scope": "Namespaced",
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [
                        {"name": "State", "type": "string", "jsonPath": ".status.state"},
                        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                    ],
                    "schema": {"openAPIV3Schema": open_api_schema()},
                }
            ],
        },
    }
