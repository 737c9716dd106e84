"""The WatchEvent wire contract (v1 and v2), parsed strictly enough to answer 400 precisely.

Upstream sends ``{"watched": {"Namespace": ..., "Name": ...}, "watchedGvk": {"group": ...,
"version": ..., "kind": ...}}``. Contract v1 also carries ``owner``: the KCP Kyma to reconcile.
Upstream's listener decodes it with Go's ``encoding/json`` into structs (``types.NamespacedName``,
``metav1.GroupVersionKind``), which matches every field name case-insensitively, preferring no
spelling: ``{"Watched": ..., "WatchedGvk": {"Kind": ...}}`` is the same event, and so is a name
spelled with the two non-ASCII letters Go's folding maps to ASCII (U+017F, a long s, and
U+212A, the Kelvin sign). So field names are matched here the same way, at every level. Where
Go would let the last of two spellings of one field win, the event is ambiguous and refused
(400). Unknown fields are ignored, as Go does, so newer watchers keep working.

Beyond upstream, our runtime watcher adds ``"change": {"operation": ..., "uid": ...,
"oldResourceVersion": ...}``: which change it saw, so the reconcile can check that the runtime
stored it instead of waiting a fixed delay. It is optional (upstream's watcher never sends it);
when present it must be well formed (400 otherwise).
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from typing import Any

from kernel.documents.nesting import DocumentInvalid, json_loads

CONTRACTS = ("v1", "v2")
MAX_BODY = 16 * 1024
CHANGE_OPERATIONS = ("CREATE", "UPDATE", "DELETE")
# A uid, a resourceVersion: short opaque tokens (etcd's are digits, uids are UUIDs).
CHANGE_TOKEN = re.compile(r"^[A-Za-z0-9._:+=/-]{0,128}$")
# Parsed events are remembered by their body's bytes (:func:`parse_event_cached`): bodies up to
# this size (a WatchEvent with the longest names Kubernetes allows and a change is under 1.5 KiB),
# at most this many of them per process (a few MiB at most).
CACHED_BODY = 2048
PARSED_KEPT = 4096


class EventInvalid(ValueError):
    """The body or path breaks the contract (400); the message says where."""


@dataclass(frozen=True)
class ObjectKey:
    namespace: str
    name: str


@dataclass(frozen=True)
class Change:
    """The change the watcher saw: the operation, the object's uid, the resourceVersion the change
    starts from (UPDATE, DELETE)."""

    operation: str
    uid: str
    old_resource_version: str


@dataclass(frozen=True)
class WatchEvent:
    contract: str
    component: str
    watched: ObjectKey
    group: str
    version: str
    kind: str
    owner: ObjectKey | None = None
    change: Change | None = None

    def payload(self) -> dict[str, Any]:
        """The body as upstream components expect it (for forwarding; without ``change``)."""
        body: dict[str, Any] = {
            "watched": {"Namespace": self.watched.namespace, "Name": self.watched.name},
            "watchedGvk": {"group": self.group, "version": self.version, "kind": self.kind},
        }
        if self.owner is not None:
            body["owner"] = {"Namespace": self.owner.namespace, "Name": self.owner.name}
        return body


# The only non-ASCII letters whose Unicode simple case folding reaches an ASCII letter (Go's
# encoding/json folds names with it): LATIN SMALL LETTER LONG S and KELVIN SIGN.
_GO_FOLDS = str.maketrans({"\u017f": "s", "\u212a": "k"})


def _spellings(names: tuple[str, ...]) -> dict[str, str]:
    """Exact spellings of ``names`` that need no folding: as given (ours), capitalised
    (upstream's Go ``types.NamespacedName``) and in lower case."""
    found: dict[str, str] = {}
    for name in names:
        for spelling in (name, name[:1].upper() + name[1:], name.lower()):
            found.setdefault(spelling, name)
    return found


_SPELLINGS: dict[tuple[str, ...], tuple[dict[str, str], dict[str, str]]] = {}


def fields(value: dict[str, Any], names: tuple[str, ...], where: str) -> dict[str, Any]:
    """The members of ``value`` named by ``names``, matched as Go's ``encoding/json`` matches a
    struct's fields: case-insensitively. Keys are the canonical names; others are ignored.

    The spellings senders use (:func:`_spellings`) are looked up as they are; only another
    spelling is folded, so the check costs one dictionary lookup per field in the common case
    (``bench/listener_checks.py``), with the same result."""
    known = _SPELLINGS.get(names)
    if known is None:
        known = _SPELLINGS[names] = (_spellings(names), {name.lower(): name for name in names})
    exact, wanted = known
    found: dict[str, Any] = {}
    for key, item in value.items():
        name = exact.get(key)
        if name is None:
            folded = key.translate(_GO_FOLDS)
            name = wanted.get(folded.lower()) if folded.isascii() else None
            if name is None:
                continue
        if name in found:
            raise EventInvalid(f"{where}{name} is given twice (field names are case-insensitive)")
        found[name] = item
    return found


def object_key(value: Any, field: str, *, name_required: bool) -> ObjectKey:
    if not isinstance(value, dict):
        raise EventInvalid(f"{field} must be an object with Namespace and Name")
    folded = fields(value, ("namespace", "name"), f"{field}.")
    for part in ("namespace", "name"):
        if not isinstance(folded.get(part, ""), str):
            raise EventInvalid(f"{field}.{part} must be a string")
    if name_required and not folded.get("name"):
        raise EventInvalid(f"{field}.name is required")
    return ObjectKey(folded.get("namespace", ""), folded.get("name", ""))


def _change(value: Any) -> Change | None:
    """The optional ``change``; ``None`` when it cannot be checked (an UPDATE or DELETE without
    the version it starts from): such an event is handled like upstream's, with the delay."""
    if not isinstance(value, dict):
        raise EventInvalid("change must be an object with operation, uid and oldResourceVersion")
    value = fields(value, ("operation", "uid", "oldResourceVersion"), "change.")
    operation = value.get("operation")
    if operation not in CHANGE_OPERATIONS:
        raise EventInvalid(f"change.operation must be one of {', '.join(CHANGE_OPERATIONS)}")
    tokens = {}
    for field in ("uid", "oldResourceVersion"):
        token = value.get(field, "")
        if not isinstance(token, str) or not CHANGE_TOKEN.match(token):
            raise EventInvalid(f"change.{field} must be a string of at most 128 letters, digits or ._:+=/-")
        tokens[field] = token
    if operation != "CREATE" and not tokens["oldResourceVersion"]:
        return None
    return Change(operation, tokens["uid"], tokens["oldResourceVersion"])


def parse_body(body: bytes) -> dict[str, Any]:
    """The body as a JSON object, or ``EventInvalid`` (malformed, too deep, not an object)."""
    try:
        data = json_loads(body, source="body")
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise EventInvalid(f"body is not JSON: {exc}") from None
    except DocumentInvalid as exc:
        raise EventInvalid(str(exc)) from None
    if not isinstance(data, dict):
        raise EventInvalid("body must be a JSON object")
    return data


def parse_event(contract: str, component: str, body: bytes) -> WatchEvent:
    if contract not in CONTRACTS:
        raise EventInvalid(f"unsupported contract version {contract!r}: use v1 or v2")
    if not component:
        raise EventInvalid("component cannot be empty")
    data = fields(parse_body(body), ("watched", "watchedGvk", "owner", "change"), "")
    if "watched" not in data:
        raise EventInvalid("watched is required")
    watched = object_key(data["watched"], "watched", name_required=True)
    gvk = data.get("watchedGvk")
    if not isinstance(gvk, dict):
        raise EventInvalid("watchedGvk must be an object with group, version and kind")
    gvk = fields(gvk, ("group", "version", "kind"), "watchedGvk.")
    for part in ("group", "version", "kind"):
        if not isinstance(gvk.get(part, ""), str):
            raise EventInvalid(f"watchedGvk.{part} must be a string")
    if not gvk.get("version") or not gvk.get("kind"):
        raise EventInvalid("watchedGvk.version and watchedGvk.kind are required")
    owner = None
    if contract == "v1":
        if "owner" not in data:
            raise EventInvalid("owner is required in contract v1 (the Kyma to reconcile)")
        owner = object_key(data["owner"], "owner", name_required=True)
        if not owner.namespace:
            raise EventInvalid("owner.namespace is required in contract v1")
    return WatchEvent(
        contract=contract,
        component=component,
        watched=watched,
        group=gvk.get("group", ""),
        version=gvk["version"],
        kind=gvk["kind"],
        owner=owner,
        change=_change(data["change"]) if data.get("change") is not None else None,
    )


_parsed = functools.lru_cache(maxsize=PARSED_KEPT)(parse_event)


def parse_event_cached(contract: str, component: str, body: bytes) -> WatchEvent:
    """:func:`parse_event`, remembered by (contract, component, body): a runtime's watcher sends
    the same few bodies again and again (upstream's carry no more than the object and its kind),
    so each distinct body is parsed and checked once per process, and a repeat costs a lookup.
    Every check still runs on every body that is new here: only events that passed them are
    remembered (a refused body raises, and is parsed and refused again next time), the events
    are immutable, and the cache is bounded (least recently used out; bodies over
    :data:`CACHED_BODY` are never kept)."""
    if len(body) > CACHED_BODY:
        return parse_event(contract, component, body)
    return _parsed(contract, component, body)
