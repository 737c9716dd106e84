"""Request bodies and the non-apply patch formats.

How the ``kubernetes`` Python client sends each PATCH (see ``kubernetes/client/rest.py``):

* a ``list`` body is sent as ``application/json-patch+json`` (RFC 6902);
* a ``dict`` body to the typed APIs (``AppsV1Api.patch_namespaced_deployment`` ...) is sent as
  ``application/strategic-merge-patch+json`` — ``rest.py`` rewrites the declared json-patch type
  when the body is not a list;
* ``CustomObjectsApi.patch_*`` sends ``application/merge-patch+json`` by default;
* ``_content_type=...`` on any generated method (or ``header_params={'Content-Type': ...}`` on
  ``ApiClient.call_api``) forces a type; the body is always JSON-encoded, including for
  ``application/apply-patch+yaml`` (JSON is valid YAML).

Strategic merge is treated as an RFC 7386 merge patch here: lists are replaced, never merged by
key, and ``$patch`` directives are not understood.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import jsonpatch
import yaml
from kmock import KubernetesError

from runtime_emulator import errors
from runtime_emulator.schemas import ANY, Node

APPLY = "application/apply-patch+yaml"
MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
PATCH_TYPES = (APPLY, MERGE, STRATEGIC, JSON_PATCH)


def clone(value: Any) -> Any:
    """Deep copy of JSON data (faster than ``copy.deepcopy`` for plain dicts and lists)."""
    return json.loads(json.dumps(value))


def parse_body(raw: bytes, content_type: str) -> Any:
    """Decode a request body; YAML is accepted only where a real server accepts it (apply)."""
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        if content_type == APPLY:
            try:
                return yaml.safe_load(raw)
            except yaml.YAMLError as exc:
                raise errors.bad_request(f"error decoding YAML: {exc}") from exc
        raise errors.bad_request("the body of the request could not be decoded as JSON") from None


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, ``null`` removes a key, everything else replaces.

    Unchanged subtrees of ``target`` and the values of ``patch`` are reused, not copied: callers
    pass data they own (a fresh request body, a clone of the stored object).
    """
    if not isinstance(patch, Mapping):
        return patch
    result = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def json_patch(target: Any, operations: Any) -> Any:
    """RFC 6902 on a copy of ``target``; failures are 422 Invalid, as on a real server."""
    if not isinstance(operations, list):
        raise errors.bad_request("json patch must be a list of operations")
    try:
        return jsonpatch.apply_patch(clone(target), operations, in_place=False)
    except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException, TypeError, KeyError) as exc:
        # A real server says no more than this (a failed "test" included).
        raise KubernetesError(
            422, "Invalid", "the server rejected our request due to an error in our request", {}
        ) from exc


_DELETE = object()


def strategic_merge(target: Any, patch: Any, node: Node) -> Any:
    """A strategic merge patch of ``target`` (see the module docstring)."""
    if not isinstance(patch, Mapping):
        return patch
    directive = patch.get("$patch")
    if directive == "delete":
        return _DELETE
    body = {k: v for k, v in patch.items() if k != "$patch"}
    if directive == "replace" or not isinstance(target, Mapping):
        return _strip(body)
    result = dict(target)
    retain = body.pop("$retainKeys", None)
    for key, value in body.items():
        if key.startswith("$setElementOrder/"):
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            gone = set(map(json.dumps, value or ()))
            result[field] = [v for v in result.get(field) or () if json.dumps(v) not in gone]
            continue
        child = node.child(key) or ANY
        if value is None:
            result.pop(key, None)
        elif isinstance(value, list) and "merge" in child.raw.get("x-kubernetes-patch-strategy", "").split(
            ","
        ):
            result[key] = _merge_list(result.get(key), value, child)
        else:
            merged = strategic_merge(result.get(key), value, child)
            if merged is _DELETE:
                result.pop(key, None)
            else:
                result[key] = merged
    if isinstance(retain, list):
        result = {k: v for k, v in result.items() if k in retain}
    return result


def _merge_list(target: Any, patch: list[Any], node: Node) -> list[Any]:
    existing = list(target) if isinstance(target, list) else []
    if any(isinstance(item, Mapping) and item.get("$patch") == "replace" for item in patch):
        return [_strip(item) for item in patch if not (isinstance(item, Mapping) and "$patch" in item)]
    key = node.raw.get("x-kubernetes-patch-merge-key")
    if not key:  # a primitive list: new values in front
        known = set(map(json.dumps, existing))
        return [v for v in patch if json.dumps(v) not in known] + existing
    items = node.items()
    patches = {item.get(key): item for item in patch if isinstance(item, Mapping)}
    present = {item.get(key) for item in existing if isinstance(item, Mapping)}
    merged: list[Any] = [
        _strip(item)
        for item in patch
        if isinstance(item, Mapping) and item.get(key) not in present and item.get("$patch") != "delete"
    ]
    for item in existing:
        change = patches.get(item.get(key)) if isinstance(item, Mapping) else None
        if change is None:
            merged.append(item)
            continue
        result = strategic_merge(item, change, items)
        if result is not _DELETE:
            merged.append(result)
    return merged


def _strip(value: Any) -> Any:
    """A patch value without directives, as it is stored."""
    if isinstance(value, Mapping):
        return {k: _strip(v) for k, v in value.items() if not k.startswith("$")}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value
