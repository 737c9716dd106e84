"""JSON Schemas for the Kubernetes-shaped documents, and path-precise error messages.

The same schemas check whole documents (``apply -f``, the REST API) and the JSON columns of the
models (admin forms, services), the way a CustomResourceDefinition's ``openAPIV3Schema`` does in
Kubernetes. Errors are reported as ``(path, reason)`` with paths like ``spec.modules[1].name``.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from django.core.exceptions import ValidationError
from django.utils.dateparse import parse_datetime
from django.utils.deconstruct import deconstructible
from jsonschema import Draft202012Validator, FormatChecker
from jsonschema.exceptions import ValidationError as SchemaError

DNS_LABEL = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
DNS_SUBDOMAIN = r"^(?=.{1,253}$)[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)*$"
_NAME_PART = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
LABEL_KEY = (
    rf"^([a-z0-9]([-a-z0-9]{{0,61}}[a-z0-9])?(\.[a-z0-9]([-a-z0-9]{{0,61}}[a-z0-9])?)*/)?{_NAME_PART}$"
)
LABEL_VALUE = rf"^({_NAME_PART})?$"
CHANNEL = r"^[a-z]+$"
DNS_LABEL_OR_ANY = r"^(\*|[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)$"
MAX_ANNOTATIONS_BYTES = 256 * 1024

STRING = {"type": "string"}
BOOLEAN = {"type": "boolean"}
INTEGER = {"type": "integer"}


def obj(properties: Mapping[str, Any], *, required: Sequence[str] = (), additional: bool = False) -> dict:
    """An object schema that rejects unknown fields unless ``additional`` is set."""
    schema: dict[str, Any] = {"type": "object", "properties": dict(properties)}
    if required:
        schema["required"] = list(required)
    if not additional:
        schema["additionalProperties"] = False
    return schema


def string(
    *, pattern: str | None = None, min_length: int | None = None, max_length: int | None = None
) -> dict:
    schema: dict[str, Any] = {"type": "string"}
    if pattern:
        schema["pattern"] = pattern
    if min_length is not None:
        schema["minLength"] = min_length
    if max_length is not None:
        schema["maxLength"] = max_length
    return schema


def enum(*values: str) -> dict:
    return {"type": "string", "enum": list(values)}


LABELS = {
    "type": "object",
    "propertyNames": {"pattern": LABEL_KEY, "maxLength": 317},
    "additionalProperties": {"type": "string", "pattern": LABEL_VALUE, "maxLength": 63},
}
ANNOTATIONS = {
    "type": "object",
    "propertyNames": {"pattern": LABEL_KEY, "maxLength": 317},
    "additionalProperties": STRING,
}
TIMESTAMP = {"type": ["string", "null"], "format": "date-time"}
CONDITION = obj(
    {
        "type": string(min_length=1, max_length=316),
        "status": enum("True", "False", "Unknown"),
        "reason": STRING,
        "message": STRING,
        "lastTransitionTime": TIMESTAMP,
        "observedGeneration": INTEGER,
    },
    required=("type", "status"),
)
CONDITIONS = {"type": "array", "items": CONDITION}
LABEL_SELECTOR = obj(
    {
        "matchLabels": LABELS,
        "matchExpressions": {
            "type": "array",
            "items": {
                **obj(
                    {
                        "key": string(pattern=LABEL_KEY),
                        "operator": enum("In", "NotIn", "Exists", "DoesNotExist"),
                        "values": {"type": "array", "items": string(pattern=LABEL_VALUE, max_length=63)},
                    },
                    required=("key", "operator"),
                ),
                "allOf": [
                    {
                        "if": {"properties": {"operator": enum("In", "NotIn")}},
                        "then": {"required": ["values"], "properties": {"values": {"minItems": 1}}},
                    },
                    {
                        "if": {"properties": {"operator": enum("Exists", "DoesNotExist")}},
                        "then": {"properties": {"values": {"maxItems": 0}}},
                    },
                ],
            },
        },
    }
)


def metadata(*, namespaced: bool) -> dict:
    """``metadata`` of an object: name (and namespace) plus read-only fields that are ignored."""
    properties: dict[str, Any] = {
        "name": string(pattern=DNS_SUBDOMAIN, max_length=253),
        "labels": LABELS,
        "annotations": ANNOTATIONS,
        # Written by the server; accepted on input so documents from `get -o yaml` apply again.
        "uid": STRING,
        "resourceVersion": STRING,
        "generation": INTEGER,
        "creationTimestamp": TIMESTAMP,
        "deletionTimestamp": TIMESTAMP,
        "finalizers": {"type": "array", "items": STRING},
        "managedFields": {"type": "array"},
    }
    if namespaced:
        properties["namespace"] = string(pattern=DNS_LABEL, max_length=63)
    return obj(properties, required=("name",))


def document(
    *, api_version: str, kind: str, spec: dict, namespaced: bool, status: dict | None = None
) -> dict:
    """The whole document of a kind; ``status`` is accepted on input (and ignored) when given.

    A ``spec`` with required fields is itself required: a document without one is refused like
    a spec without those fields (a CRD says the same with ``required: [spec]``)."""
    required = (
        ("apiVersion", "kind", "metadata", "spec")
        if spec.get("required")
        else ("apiVersion", "kind", "metadata")
    )
    return obj(
        {
            "apiVersion": {"const": api_version},
            "kind": {"const": kind},
            "metadata": metadata(namespaced=namespaced),
            "spec": spec,
            "status": status or {"type": "object"},
        },
        required=required,
    )


_FORMATS = FormatChecker(formats=())


@_FORMATS.checks("date-time", raises=ValueError)
def _is_datetime(value: object) -> bool:
    if not isinstance(value, str):
        return True
    parsed = parse_datetime(value)
    return parsed is not None and parsed.tzinfo is not None


# Friendly words for the patterns, so errors read as rules rather than regular expressions.
PATTERN_RULES = {
    DNS_LABEL: "must be a DNS label: lower-case letters, digits and '-', starting and ending with a letter "
    "or digit, at most 63 characters",
    DNS_SUBDOMAIN: "must be a DNS subdomain: dot-separated DNS labels, at most 253 characters",
    LABEL_KEY: "must be a qualified name: an optional DNS subdomain prefix and '/', then at most 63 letters, "
    "digits, '-', '_' or '.', starting and ending with a letter or digit",
    LABEL_VALUE: "must be empty or at most 63 letters, digits, '-', '_' or '.', starting and ending with a "
    "letter or digit",
    CHANNEL: "must be lower-case letters only",
    DNS_LABEL_OR_ANY: "must be a DNS label (lower-case letters, digits and '-', at most 63 characters) "
    "or '*'",
}


@functools.lru_cache(maxsize=256)
def _validator(schema_json: str) -> Draft202012Validator:
    return Draft202012Validator(json.loads(schema_json), format_checker=_FORMATS)


def format_path(parts: Iterable[str | int], base: str = "") -> str:
    path = base
    for part in parts:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path = f"{path}.{part}" if path else str(part)
    return path


_TYPE_NAMES = {
    str: "string",
    bool: "boolean",
    int: "integer",
    float: "number",
    list: "array",
    dict: "object",
    type(None): "null",
}


def type_name(value: object) -> str:
    """The JSON name of a parsed value's type (``object``, ``array``, ``string``, ...)."""
    return _TYPE_NAMES.get(type(value), type(value).__name__)


def _describe(error: SchemaError, base: str) -> list[tuple[str, str]]:
    path = format_path(error.absolute_path, base)
    if "propertyNames" in error.absolute_schema_path and isinstance(error.instance, str):
        rule = PATTERN_RULES.get(error.validator_value, error.message)
        return [(format_path([error.instance], path), f"invalid key: {rule}")]
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        known = set(error.schema.get("properties", {}))
        extra = sorted(key for key in error.instance if key not in known)
        return [(format_path([key], path), "unknown field") for key in extra]
    if error.validator == "required":
        missing = error.message.split("'")[1] if "'" in error.message else error.message
        return [(format_path([missing], path), "required field is missing")]
    if error.validator == "type":
        expected = error.validator_value
        expected = " or ".join(expected) if isinstance(expected, list) else expected
        got = _TYPE_NAMES.get(type(error.instance), type(error.instance).__name__)
        return [(path, f"expected {expected}, got {got}")]
    if error.validator == "enum":
        allowed = ", ".join(str(value) for value in error.validator_value)
        return [(path, f"{error.instance!r} is not one of: {allowed}")]
    if error.validator == "const":
        return [(path, f"must be {error.validator_value!r}, got {error.instance!r}")]
    if error.validator == "pattern":
        rule = PATTERN_RULES.get(error.validator_value, f"must match {error.validator_value}")
        return [(path, f"{error.instance!r} {rule}")]
    if (
        error.validator == "not"
        and isinstance(error.validator_value, dict)
        and "const" in error.validator_value
    ):
        return [(path, f"{error.instance!r} is reserved and not allowed")]
    if error.validator == "format":
        return [
            (path, f"{error.instance!r} is not a valid {error.validator_value} (RFC 3339 with a time zone)")
        ]
    if error.validator in ("minimum", "maximum"):
        return [(path, f"{error.instance} is out of range ({error.message.split(' is ', 1)[-1]})")]
    return [(path, error.message)]


def schema_errors(schema: Mapping[str, Any], instance: Any, base: str = "") -> list[tuple[str, str]]:
    """Every violation of ``schema`` by ``instance`` as ``(path, reason)``, in document order."""
    validator = _validator(json.dumps(schema, sort_keys=True))
    found: list[tuple[str, str]] = []
    for error in sorted(validator.iter_errors(instance), key=lambda e: [str(p) for p in e.absolute_path]):
        if error.validator in ("allOf", "if") and error.context:
            for sub in error.context:
                found.extend(_describe(sub, format_path(error.absolute_path, base)))
            continue
        found.extend(_describe(error, base))
    return list(dict.fromkeys(found))


@deconstructible
class SchemaValidator:
    """A Django field validator checking a JSON value against a schema with path-precise messages."""

    def __init__(self, schema: Mapping[str, Any], label: str = "") -> None:
        self.schema = dict(schema)
        self.label = label

    def __call__(self, value: Any) -> None:
        problems = schema_errors(self.schema, value, self.label)
        if problems:
            raise ValidationError([f"{path}: {reason}" if path else reason for path, reason in problems])

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, SchemaValidator) and other.schema == self.schema and other.label == self.label
        )

    def __hash__(self) -> int:
        return hash(json.dumps(self.schema, sort_keys=True))
