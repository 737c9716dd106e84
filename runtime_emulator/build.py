"""How a write request turns into the next stored version of an object.

These are the rules a real API server enforces before anything reaches storage: identity and
server-owned metadata cannot be set by clients, ``status`` and the main resource are written
through separate endpoints when the resource has a status subresource, ``resourceVersion`` in a
body is an optimistic-concurrency precondition, and ``generation`` only moves when the desired
state (anything outside metadata and status) changes.
"""

from __future__ import annotations

import re
import secrets
import time
import uuid
from collections.abc import Mapping
from typing import Any

from runtime_emulator import catalog, errors
from runtime_emulator.catalog import ResourceType

SERVER_METADATA = (
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
    "resourceVersion",
    "managedFields",
    "selfLink",
)
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def now() -> str:
    """RFC 3339 UTC timestamp with second precision, as Kubernetes writes them."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def random_suffix(length: int = 5) -> str:
    """Like the apiserver's generateName suffixes (no vowels, no look-alike digits)."""
    return "".join(secrets.choice(_SUFFIX_ALPHABET) for _ in range(length))


def validate_name(rtype: ResourceType, name: str) -> None:
    """422 for names the kind's validation would reject (RBAC names are path segments)."""
    if rtype.group == "rbac.authorization.k8s.io":
        ok, rule = name not in (".", "..") and not set(name) & set("/%"), "may not contain '/' or '%'"
    elif rtype is catalog.NAMESPACES:
        ok = len(name) <= 63 and bool(_LABEL.match(name))
        rule = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-'"
    else:
        ok = len(name) <= 253 and bool(_SUBDOMAIN.match(name))
        rule = (
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
            "'-' or '.', and must start and end with an alphanumeric character"
        )
    if not ok:
        raise errors.invalid(
            rtype.kind, rtype.group, name, "metadata.name", f'Invalid value: "{name}": {rule}'
        )


def _check_body(rtype: ResourceType, body: Any) -> dict[str, Any]:
    if not isinstance(body, dict) or not isinstance(body.setdefault("metadata", {}), dict):
        raise errors.bad_request(f"the body of the request is not a valid {rtype.kind} object")
    for key, expected in (("apiVersion", rtype.api_version), ("kind", rtype.kind)):
        given = body.get(key)
        if given and given != expected and not (key == "apiVersion" and not rtype.builtin):
            raise errors.bad_request(
                f"the {key} of the provided object ({given}) does not match the expected {expected}"
            )
    body["apiVersion"], body["kind"] = rtype.api_version, rtype.kind
    return body


def created(rtype: ResourceType, body: Any, namespace: str | None) -> dict[str, Any]:
    """A new object from a create body: identity checked, server metadata stamped."""
    obj = _check_body(rtype, body)
    meta = obj["metadata"]
    name = meta.get("name") or (meta["generateName"] + random_suffix() if meta.get("generateName") else "")
    if not name:
        raise errors.invalid(
            rtype.kind, rtype.group, "", "metadata.name", "Required value: name or generateName is required"
        )
    validate_name(rtype, name)
    meta["name"] = name
    if rtype.namespaced:
        if meta.get("namespace") and meta["namespace"] != namespace:
            raise errors.bad_request(
                "the namespace of the provided object does not match the namespace sent on the request"
            )
        meta["namespace"] = namespace
    else:
        meta.pop("namespace", None)
    for key in SERVER_METADATA:
        meta.pop(key, None)
    meta["uid"] = str(uuid.uuid4())
    meta["creationTimestamp"] = now()
    meta["resourceVersion"] = ""
    if rtype.generation:
        meta["generation"] = 1
    return obj


def updated(rtype: ResourceType, old: Mapping[str, Any], body: Any, subresource: str) -> dict[str, Any]:
    """The next version of ``old`` from a full body (PUT, or a patch already applied to ``old``)."""
    obj = _check_body(rtype, body)
    meta, old_meta = obj["metadata"], old["metadata"]
    if meta.get("name") and meta["name"] != old_meta["name"]:
        raise errors.bad_request(
            f"the name of the object ({meta['name']}) does not match the name on the URL ({old_meta['name']})"
        )
    if rtype.namespaced and meta.get("namespace") and meta["namespace"] != old_meta.get("namespace"):
        raise errors.bad_request(
            "the namespace of the provided object does not match the namespace sent on the request"
        )
    expected_rv = meta.get("resourceVersion")
    if expected_rv and expected_rv != old_meta["resourceVersion"]:
        raise errors.conflict(rtype.plural, rtype.group, old_meta["name"])
    if subresource == "status":
        # Only the status changes; everything else (labels included) is the stored object's.
        result = {key: value for key, value in old.items() if key != "status"}
        if "status" in obj:
            result["status"] = obj["status"]
        result["metadata"] = dict(old_meta)
        return result
    for key in ("name", "namespace", *SERVER_METADATA):
        if key == "managedFields" and meta.get(key):
            continue  # a request that sets them replaces them (an empty or missing list keeps them)
        if key in old_meta:
            meta[key] = old_meta[key]
        else:
            meta.pop(key, None)
    if rtype.has_status:
        obj.pop("status", None)
        if "status" in old:
            obj["status"] = old["status"]
    return obj


def desired_state_changed(rtype: ResourceType, old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """Whether ``metadata.generation`` must move: anything but metadata (and a separate status)."""
    ignored = ("metadata", "status") if rtype.has_status else ("metadata",)
    keys = (old.keys() | new.keys()) - set(ignored)
    return any(old.get(key) != new.get(key) for key in keys)


def _without_times(entries: Any) -> list[Any]:
    return [{k: v for k, v in e.items() if k != "time"} for e in entries or ()]


def unchanged(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """A no-op write: equal except resourceVersion and managedFields timestamps (not persisted)."""
    if old.keys() != new.keys() or any(old[k] != new[k] for k in old if k != "metadata"):
        return False
    old_meta, new_meta = old["metadata"], new["metadata"]
    keys = (old_meta.keys() | new_meta.keys()) - {"resourceVersion", "managedFields"}
    if any(old_meta.get(k) != new_meta.get(k) for k in keys):
        return False
    return _without_times(old_meta.get("managedFields")) == _without_times(new_meta.get("managedFields"))


def delete_status(rtype: ResourceType, obj: Mapping[str, Any]) -> dict[str, Any]:
    """What DELETE answers for kinds that do not return the deleted object."""
    meta = obj["metadata"]
    details = {"name": meta["name"], "kind": rtype.plural, "uid": meta.get("uid", "")}
    if rtype.group:
        details["group"] = rtype.group
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details}


def crd_status(crd: Mapping[str, Any], previous: Mapping[str, Any] | None) -> dict[str, Any]:
    """What the apiextensions controllers report once a CRD's names are accepted."""
    spec = crd["spec"]
    names = dict(spec["names"])
    names.setdefault("singular", names["kind"].lower())
    names.setdefault("listKind", f"{names['kind']}List")
    stored = list((previous or {}).get("storedVersions") or ())
    for version in spec.get("versions") or ():
        if version.get("storage") and version["name"] not in stored:
            stored.append(version["name"])
    if previous and previous.get("acceptedNames") == names and previous.get("storedVersions") == stored:
        return dict(previous)
    stamp = now()
    accepted = "the initial names have been accepted"
    return {
        "conditions": [
            {
                "type": "NamesAccepted",
                "status": "True",
                "reason": "NoConflicts",
                "message": "no conflicts found",
                "lastTransitionTime": stamp,
            },
            {
                "type": "Established",
                "status": "True",
                "reason": "InitialNamesAccepted",
                "message": accepted,
                "lastTransitionTime": stamp,
            },
        ],
        "acceptedNames": names,
        "storedVersions": stored or [spec["versions"][0]["name"]],
    }


def deployment_problems(
    spec: Mapping[str, Any], old_spec: Mapping[str, Any] | None
) -> tuple[str, str] | None:
    """The (field, message) a real server would reject a Deployment spec with, if any."""
    selector = spec.get("selector")
    if not selector:
        return "spec.selector", "Required value"
    labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
    wanted = selector.get("matchLabels") or {}
    if any(labels.get(k) != v for k, v in wanted.items()):
        return "spec.template.metadata.labels", "Invalid value: `selector` does not match template `labels`"
    if old_spec is not None and old_spec.get("selector") != selector:
        return "spec.selector", "field is immutable"
    if not (spec.get("template") or {}).get("spec", {}).get("containers"):
        return "spec.template.spec.containers", "Required value"
    return None
