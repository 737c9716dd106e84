"""What a real API server does with a body before it stores it, by the kind's schema
(:mod:`runtime_emulator.schemas`):

* **typed check** of a server-side apply: a value of the wrong type, a field the schema does not
  declare, a keyed list item without its key or twice — the apiserver's 500 "failed to create
  typed patch object" (``fleet.k8s.client`` treats it as permanent);
* **pruning** of fields the schema does not declare (and of ``null`` where it is not nullable)
  from other writes; with ``fieldValidation=Strict`` they are a 400 instead;
* **defaulting** and **validation** of custom resources by their CRD's structural schema: types,
  ``required``, ``enum``, ``pattern``, lengths, bounds, item counts, ``format: date-time``, ``not``,
  ``allOf``/``anyOf``/``oneOf``, and duplicate keys of keyed and set lists — a 422 whose causes
  name each field, worded as the apiserver words them. CEL rules (``x-kubernetes-validations``)
  are not evaluated (see the package's known gaps).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from runtime_emulator.patches import clone
from runtime_emulator.schemas import Node

_DATE_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")
Cause = tuple[str, str, str]  # (reason, field, message)


def _type_of(value: Any) -> str:
    """The JSON type of a value, as validation messages name it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _fits(value: Any, node: Node) -> bool:
    return node.anything or value is None or _type_of(value) in node.types


def _go(value: Any) -> str:
    """Roughly how structured-merge-diff prints an offending value."""
    return f"&{{{value}}}" if isinstance(value, str) else f"&value.valueUnstructured{{Value:{value}}}"


def _expected(value: Any, node: Node) -> str:
    if "string" in node.types and "integer" not in node.types:
        return f"expected string, got {_go(value)}"
    if "integer" in node.types:
        got = _type_of(value) if isinstance(value, (str, bool)) else _go(value)
        return f"expected numeric (int or float), got {got}"
    if "boolean" in node.types:
        return f"expected boolean, got {_go(value)}"
    if "array" in node.types:
        return f"expected list, got {_go(value)}"
    return f"expected map, got {_go(value)}"


# -- the typed check of an apply ----------------------------------------------------------------


def typed_errors(value: Any, node: Node, path: str = "") -> list[str]:
    """Why an applied configuration cannot be typed by ``node`` (empty: it can)."""
    if node.anything or value is None:
        return []
    if not _fits(value, node):
        return [f"{path}: {_expected(value, node)}"]
    found: list[str] = []
    if isinstance(value, dict):
        # Undeclared fields are reported alone: the object's other fields are not looked at.
        found = [f"{path}.{key}: field not declared in schema" for key in value if node.child(key) is None]
        if found:
            return found
        for key, child in value.items():
            found += typed_errors(child, node.child(key), f"{path}.{key}")  # type: ignore[arg-type]
    elif isinstance(value, list):
        found += _list_errors(value, node, path)
    return found


def _list_errors(value: list[Any], node: Node, path: str) -> list[str]:
    items, found, seen = node.items(), [], set()
    for index, item in enumerate(value):
        if node.list_type == "map":
            if not isinstance(item, dict):
                found += typed_errors(item, items, f"{path}[{index}]")
                continue
            keys = {k: item.get(k, items.key_defaults.get(k)) for k in node.list_keys}
            keys = {k: v for k, v in keys.items() if v is not None}
            if not keys:
                names = json.dumps(list(node.list_keys), separators=(",", ":"))
                found.append(
                    f"{path}: element {index}: associative list with keys has an element that omits all "
                    f"key fields {names} (and doesn't have default values for any key fields)"
                )
                continue
            label = ",".join(f"{k}={json.dumps(v)}" for k, v in keys.items())
            found += typed_errors(item, items, f"{path}[{label}]")
            marker = json.dumps(keys, sort_keys=True)
        elif node.list_type == "set":
            label = f"={json.dumps(item)}"
            found += typed_errors(item, items, f"{path}[{label}]")
            marker = json.dumps(item, sort_keys=True)
        else:
            found += typed_errors(item, items, f"{path}[{index}]")
            continue
        if marker in seen:
            found.append(f"{path}: duplicate entries for key [{label}]")
        seen.add(marker)
    return found


# -- pruning ------------------------------------------------------------------------------------


def prune(value: Any, node: Node, path: str = "") -> list[str]:
    """Drop, in place, what ``node`` does not declare; returns the dropped fields' paths."""
    dropped: list[str] = []
    if node.anything or not isinstance(value, (dict, list)):
        return dropped
    if isinstance(value, dict) and node.is_object():
        for key in list(value):
            below = node.child(key)
            where = f"{path}.{key}" if path else key
            if below is None:
                del value[key]
                dropped.append(where)
            elif value[key] is None and node.crd and not below.nullable and not below.anything:
                del value[key]
            else:
                dropped += prune(value[key], below, where)
    elif isinstance(value, list) and "array" in node.types:
        items = node.items()
        for index, item in enumerate(value):
            dropped += prune(item, items, f"{path}[{index}]")
    return dropped


# -- defaulting (custom resources) --------------------------------------------------------------


def default(value: Any, node: Node) -> None:
    """Fill in, in place, the schema's ``default`` of every missing field (custom resources)."""
    if node.anything or not node.crd:
        return
    if isinstance(value, dict) and node.is_object():
        for key, raw in node.properties.items():
            if "default" in raw and (key not in value or (value[key] is None and not raw.get("nullable"))):
                value[key] = clone(raw["default"])
        for key, child in value.items():
            below = node.child(key)
            if below is not None:
                default(child, below)
    elif isinstance(value, list) and "array" in node.types:
        items = node.items()
        for item in value:
            default(item, items)


# -- validation (custom resources) ----------------------------------------------------------------


def validate(value: Any, node: Node, path: str = "") -> list[Cause]:
    """What the CRD's structural schema refuses in ``value`` (``[]``: nothing)."""
    if node.anything or not node.crd:
        return []
    if value is None:
        return []  # (pruned unless nullable)
    if not _fits(value, node):
        got = _type_of(value)
        expected = (
            "integer" if node.types == {"integer"} else sorted(node.types - {"integer"} or node.types)[0]
        )
        return [
            (
                "FieldValueTypeInvalid",
                path,
                f'Invalid value: "{got}": {path} in body must be of type {expected}: "{got}"',
            )
        ]
    raw, causes = node.raw, []
    causes += _value_rules(value, raw, path)
    if isinstance(value, Mapping):
        for key in raw.get("required") or ():
            if key not in value:
                causes.append(("FieldValueRequired", _join(path, key), "Required value"))
        for key, child in value.items():
            below = node.child(key)
            if below is not None and (path or key not in ("apiVersion", "kind", "metadata")):
                causes += validate(child, below, _join(path, key))
    elif isinstance(value, list):
        causes += _items(value, node, path)
    for sub in raw.get("allOf") or ():
        causes += _validate_raw(value, sub, node, path)
    if raw.get("anyOf") and all(_validate_raw(value, sub, node, path) for sub in raw["anyOf"]):
        causes.append(
            (
                "FieldValueInvalid",
                path,
                f"Invalid value: {_show(value)}: must validate at least one schema (anyOf)",
            )
        )
    if raw.get("oneOf"):
        matching = sum(not _validate_raw(value, sub, node, path) for sub in raw["oneOf"])
        if matching != 1:
            causes.append(
                (
                    "FieldValueInvalid",
                    path,
                    f"Invalid value: {_show(value)}: must validate one and only one schema (oneOf)",
                )
            )
    if isinstance(raw.get("not"), Mapping) and not _validate_raw(value, raw["not"], node, path):
        causes.append(
            ("FieldValueInvalid", "<nil>", f'Invalid value: "": "{path}" must not validate the schema (not)')
        )
    return causes


def _validate_raw(value: Any, raw: Mapping[str, Any], node: Node, path: str) -> list[Cause]:
    """The causes of a junctor's sub-schema (value rules only, as structural schemas allow)."""
    causes = _value_rules(value, raw, path)
    if isinstance(value, Mapping):
        for key in raw.get("required") or ():
            if key not in value:
                causes.append(("FieldValueRequired", _join(path, key), "Required value"))
        for key, sub in (raw.get("properties") or {}).items():
            if key in value:
                causes += _validate_raw(value[key], sub, node.child(key) or node, _join(path, key))
    return causes


def _value_rules(value: Any, raw: Mapping[str, Any], path: str) -> list[Cause]:
    causes: list[Cause] = []
    shown = _show(value)

    def invalid(why: str) -> None:
        causes.append(("FieldValueInvalid", path, f"Invalid value: {shown}: {path} in body {why}"))

    if "enum" in raw and value not in raw["enum"]:
        supported = ", ".join(json.dumps(v) for v in raw["enum"])
        causes.append(
            ("FieldValueNotSupported", path, f"Unsupported value: {shown}: supported values: {supported}")
        )
    if isinstance(value, str):
        if "maxLength" in raw and len(value) > raw["maxLength"]:
            causes.append(
                ("FieldValueTooLong", path, f"Too long: may not be more than {raw['maxLength']} bytes")
            )
        if "minLength" in raw and len(value) < raw["minLength"]:
            invalid(f"should be at least {raw['minLength']} chars long")
        if "pattern" in raw and not re.search(raw["pattern"], value):
            invalid(f"should match '{raw['pattern']}'")
        if raw.get("format") == "date-time" and not _DATE_TIME.match(value):
            invalid(f"must be of type date-time: {shown}")
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        low, high = raw.get("minimum"), raw.get("maximum")
        exclusive_low, exclusive_high = bool(raw.get("exclusiveMinimum")), bool(raw.get("exclusiveMaximum"))
        if low is not None and (value <= low if exclusive_low else value < low):
            invalid(f"should be greater than {'' if exclusive_low else 'or equal to '}{low}")
        if high is not None and (value >= high if exclusive_high else value > high):
            invalid(f"should be less than {'' if exclusive_high else 'or equal to '}{high}")
    elif isinstance(value, list):
        if "maxItems" in raw and len(value) > raw["maxItems"]:
            causes.append(
                (
                    "FieldValueTooMany",
                    path,
                    f"Too many: {len(value)}: must have at most {raw['maxItems']} items",
                )
            )
        if "minItems" in raw and len(value) < raw["minItems"]:
            invalid(f"should have at least {raw['minItems']} items")
    return causes


def _items(value: list[Any], node: Node, path: str) -> list[Cause]:
    items, causes, seen = node.items(), [], set()
    for index, item in enumerate(value):
        where = f"{path}[{index}]"
        causes += validate(item, items, where)
        if node.list_type == "map" and isinstance(item, Mapping):
            keys = {k: item[k] for k in node.list_keys if k in item}
            marker = json.dumps(keys, separators=(",", ":"))
        elif node.list_type == "set":
            marker = json.dumps(item, separators=(",", ":"), sort_keys=True)
        else:
            continue
        if marker in seen:
            causes.append(("FieldValueDuplicate", where, f"Duplicate value: {marker}"))
        seen.add(marker)
    return causes


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _show(value: Any) -> str:
    return (
        json.dumps(value, separators=(",", ":")) if not isinstance(value, (dict, list)) else _type_of(value)
    )
