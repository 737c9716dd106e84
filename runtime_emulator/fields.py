"""Managed fields and server-side apply, as structured-merge-diff does them on a real server.

Ownership is a set of field paths per field manager, stored as ``metadata.managedFields`` entries in
the real ``FieldsV1`` encoding. A path is a tuple of the encoding's own elements: ``f:<field>``, a
keyed list item ``k:{"name":"c"}`` (lists of ``x-kubernetes-list-type: map``), a set member
``v:"x"`` (``set`` lists); a path owned while other paths continue below it is encoded with a
``"."`` child. Which maps and lists are granular comes from the kind's schema
(:mod:`runtime_emulator.schemas`); atomic lists and maps, and lists of kinds without a schema,
are owned and replaced as a whole.

What holds, as on a real server:

* an apply owns exactly what it applies (every leaf, every keyed list item); it removes what its
  manager applied before and no longer applies, unless another manager owns it too; keyed list
  items merge by key, in the order a real server gives them;
* an apply that changes a field another manager owns is a 409 Conflict naming that manager (and,
  for an Update manager, the API version it used), unless ``force=true``, which takes it over;
  the same value is no conflict: both own the field;
* an update (create, PUT, merge/JSON patch) owns what it adds and changes (a map or item it adds
  with its ``"."``), and whatever it changes or removes is no longer anyone else's;
* ``apiVersion``, ``kind`` and server-set metadata are not tracked; of metadata only ``labels``,
  ``annotations``, ``finalizers`` and ``ownerReferences`` are; for resources with a ``status``
  subresource, ``status`` belongs to the ``status`` scope.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from runtime_emulator import errors
from runtime_emulator.patches import clone
from runtime_emulator.schemas import ANY, Node

Path = tuple[str, ...]
TRACKED_METADATA = ("labels", "annotations", "finalizers", "ownerReferences")
LEAF, MAP, LIST, ITEM = "leaf", "map", "list", "item"
_MISSING = object()


@dataclass(slots=True)
class Entry:
    """One ``managedFields`` entry: what one manager owns through one operation and scope."""

    manager: str
    operation: str  # "Apply" or "Update"
    subresource: str
    api_version: str
    time: str
    paths: set[Path] = field(default_factory=set)
    # The stored encoding and what it encodes, reused while the paths stay the same.
    stored: tuple[frozenset[Path], Mapping[str, Any]] | None = None

    def render(self) -> dict[str, Any]:
        """The entry as it appears in ``metadata.managedFields``."""
        if self.stored is not None and self.stored[0] == self.paths:
            fields_v1 = self.stored[1]
        else:
            fields_v1 = encode(self.paths)
        rendered: dict[str, Any] = {
            "manager": self.manager,
            "operation": self.operation,
            "apiVersion": self.api_version,
            "time": self.time,
            "fieldsType": "FieldsV1",
            "fieldsV1": fields_v1,
        }
        if self.subresource:
            rendered["subresource"] = self.subresource
        return rendered

    def sort_key(self) -> tuple[str, ...]:
        # A real server lists Apply entries before Update ones, each oldest first.
        return (self.operation, self.time, self.manager, self.api_version, self.subresource)

    def who(self) -> str:
        """How a conflict names this manager."""
        name = f'"{self.manager}"'
        return name if self.operation == "Apply" else f"{name} using {self.api_version}"


def encode(paths: Iterable[Path]) -> dict[str, Any]:
    """Paths → ``FieldsV1`` (``{'f:spec': {'f:replicas': {}}}``; ``"."`` for an owned parent).

    The same paths give the same encoding, shared: it goes into stored objects, which are never
    changed (a write clones what it changes), so nobody may change it. A fleet's runtimes hold
    objects of the same shapes (every runtime's watcher Deployment has the same fields), and
    encoding them anew took a seventh of the emulator's CPU of a first reconcile (py-spy over
    a fleet's first reconciles, as ``bench/fleet.py`` runs them)."""
    return _encoded(frozenset(paths))


@functools.lru_cache(maxsize=4096)
def _encoded(owned: frozenset[Path]) -> dict[str, Any]:
    root: dict[str, Any] = {}
    for path in sorted(owned):
        node = root
        for part in path:
            node = node.setdefault(part, {})
    _dot(root, (), owned)
    return root


def _dot(node: dict[str, Any], path: Path, owned: frozenset[Path]) -> None:
    for part, child in list(node.items()):
        below = (*path, part)
        if child:
            _dot(child, below, owned)
            if below in owned:
                child["."] = {}
        node[part] = dict(sorted(child.items()))


def decode(node: Mapping[str, Any], prefix: Path = ()) -> set[Path]:
    """``FieldsV1`` → paths."""
    paths: set[Path] = set()
    for key, child in node.items():
        if key == ".":
            paths.add(prefix)
            continue
        path = (*prefix, key)
        if isinstance(child, Mapping) and any(k != "." for k in child):
            paths |= decode(child, path)
        else:
            paths.add(path)
    return paths


def parse_entries(obj: Mapping[str, Any] | None) -> list[Entry]:
    """The managed-fields entries of an object (none for ``None``)."""
    raw = ((obj or {}).get("metadata") or {}).get("managedFields") or ()
    entries = []
    for e in raw:
        encoded = e.get("fieldsV1") or {}
        paths = decode(encoded)
        entry = Entry(
            e.get("manager", ""),
            e.get("operation", "Update"),
            e.get("subresource", ""),
            e.get("apiVersion", ""),
            e.get("time", ""),
            paths,
        )
        entry.stored = (frozenset(paths), encoded)  # (stored objects are never changed)
        entries.append(entry)
    return entries


def _store_entries(obj: dict[str, Any], entries: list[Entry]) -> None:
    kept = [e.render() for e in sorted(entries, key=Entry.sort_key) if e.paths]
    metadata = obj.setdefault("metadata", {})
    if kept:
        metadata["managedFields"] = kept
    else:
        metadata.pop("managedFields", None)


def scoped(obj: Mapping[str, Any], subresource: str, separate_status: bool) -> dict[str, Any]:
    """The part of ``obj`` a writer of this scope may set (main resource or ``status``)."""
    if subresource == "status":
        return {"status": obj["status"]} if "status" in obj else {}
    result: dict[str, Any] = {}
    for key, value in obj.items():
        if key in ("apiVersion", "kind") or (key == "status" and separate_status):
            continue
        if key == "metadata":
            meta = {k: value[k] for k in TRACKED_METADATA if isinstance(value, Mapping) and k in value}
            if meta:
                result["metadata"] = meta
        else:
            result[key] = value
    return result


# -- paths of a value, as its schema says ------------------------------------------------------


def item_key(item: Any, list_node: Node, index: int) -> str:
    """The path element of one list item: ``k:{...}`` (keyed), ``v:...`` (set) or ``i:<n>``."""
    if list_node.list_type == "set":
        return "v:" + _json(item)
    if list_node.list_type == "map" and isinstance(item, dict):
        defaults = list_node.items().key_defaults
        parts = []
        for key in sorted(list_node.list_keys):
            value = item.get(key, defaults.get(key))
            if value is not None:
                parts.append(f'"{key}":{_json(value)}')
        if parts:
            return "k:{" + ",".join(parts) + "}"
    return f"i:{index}"


def _json(value: Any) -> str:
    """Compact JSON of a key value (plain strings without a call to the encoder)."""
    if (
        isinstance(value, str)
        and value.isascii()
        and value.isprintable()
        and '"' not in value
        and "\\" not in value
    ):
        return f'"{value}"'
    return json.dumps(value, separators=(",", ":"))


def _granular_list(value: Any, node: Node) -> bool:
    return isinstance(value, list) and not node.anything and node.list_type in ("map", "set")


def _granular_map(value: Any, node: Node) -> bool:
    return isinstance(value, dict) and not node.atomic_map and (node.anything or node.is_object())


def flatten(value: Mapping[str, Any], node: Node | None) -> dict[Path, tuple[str, Any]]:
    """Every path of a (scoped) object: maps, lists and keyed items, and leaves with their values."""
    out: dict[Path, tuple[str, Any]] = {}
    root = node or ANY
    for key, child in value.items():
        _flatten(child, root.child(key) or ANY, (f"f:{key}",), out)
    out.pop(("f:metadata",), None)  # metadata itself is the server's
    return out


def _flatten(value: Any, node: Node, path: Path, out: dict[Path, tuple[str, Any]]) -> None:
    if _granular_map(value, node):
        out[path] = (MAP, len(value))
        for key, child in value.items():
            _flatten(child, node.child(key) or ANY, (*path, f"f:{key}"), out)
    elif _granular_list(value, node):
        out[path] = (LIST, len(value))
        items = node.items()
        for index, item in enumerate(value):
            element = (*path, item_key(item, node, index))
            if node.list_type == "map" and isinstance(item, dict):
                out[element] = (ITEM, None)
                for key, child in item.items():
                    _flatten(child, items.child(key) or ANY, (*element, f"f:{key}"), out)
            else:
                out[element] = (LEAF, item)
    else:
        out[path] = (LEAF, value)


def owned_by_apply(flat: Mapping[Path, tuple[str, Any]]) -> set[Path]:
    """What an applied configuration owns: its leaves, its keyed list items and its empty maps
    (an empty keyed list owns nothing)."""
    return {path for path, (kind, size) in flat.items() if kind in (LEAF, ITEM) or (kind == MAP and not size)}


def changes(before: Mapping[Path, tuple[str, Any]], after: Mapping[Path, tuple[str, Any]]) -> set[Path]:
    """Paths added, removed, or whose leaf value (or kind) changed."""
    changed = before.keys() ^ after.keys()
    for path in before.keys() & after.keys():
        old, new = before[path], after[path]
        if old[0] != new[0] or (old[0] == LEAF and old[1] != new[1]):  # (a map's size is no change)
            changed.add(path)
    return changed


# -- merging and removing ----------------------------------------------------------------------


def merge(live: Any, config: Any, node: Node) -> Any:
    """``config`` applied onto ``live``: granular maps merge, keyed lists merge item by item."""
    if config is None:
        return _null(live, node)
    if _granular_map(config, node):
        base = live if isinstance(live, dict) else {}
        result = dict(base)
        for key, value in config.items():
            merged = merge(base.get(key), value, node.child(key) or ANY)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
        return result
    if _granular_list(config, node):
        return _merge_items(live if isinstance(live, list) else [], config, node)
    return config


def _null(live: Any, node: Node) -> Any:
    """An applied ``null``: a scalar field becomes its type's zero value (as Go decodes it); a map
    or list field keeps what it has (the applier owns it, empty)."""
    for names, zero in (({"string"}, ""), ({"integer"}, 0), ({"integer", "number"}, 0), ({"boolean"}, False)):
        if node.types == names:
            return zero
    return live


def _merge_items(live: list[Any], config: list[Any], node: Node) -> list[Any]:
    """Keyed items in the order a real server merges them: live-only items stay where they were,
    applied items follow the applied order, shared ones are merged in place."""
    live_keys = [item_key(item, node, i) for i, item in enumerate(live)]
    config_keys = [item_key(item, node, i) for i, item in enumerate(config)]
    by_key = dict(zip(live_keys, live, strict=True))
    applied = set(config_keys)
    shared = [k for k in config_keys if k in by_key]
    items = node.items()
    out: list[Any] = []
    done: set[str] = set()
    i = j = 0
    while i < len(live) or j < len(config):
        if i < len(live):
            key = live_keys[i]
            if key in done:
                i += 1
                continue
            if key not in applied:
                out.append(live[i])
                done.add(key)
                i += 1
                continue
            if j < len(config) and config_keys[j] == key:
                out.append(merge(live[i], config[j], items))
                done.add(key)
                i, j = i + 1, j + 1
                if shared and shared[0] == key:
                    shared.pop(0)
                continue
            if shared and shared[0] != key:
                i += 1  # a shared item the applied order puts later: merged when it comes up
                continue
        if j < len(config):
            key = config_keys[j]
            if key not in done:
                out.append(merge(by_key.get(key), config[j], items))
                done.add(key)
            if shared and shared[0] == key:
                shared.pop(0)
            j += 1
        else:
            i += 1
    return out


def remove_path(obj: dict[str, Any], path: Path, root: Node, protected: set[Path]) -> None:
    """Delete a field, item or set member, and the containers it leaves empty (unless protected)."""
    chain: list[tuple[Any, str, Node]] = []  # (container, element, node of the container)
    container: Any = obj
    node = root
    for part in path:
        chain.append((container, part, node))
        container, node = _step(container, part, node)
        if container is _MISSING:
            return
    for depth in range(len(chain) - 1, -1, -1):
        parent, part, parent_node = chain[depth]
        if depth < len(chain) - 1:
            child, _ = _step(parent, part, parent_node)
            if child or path[: depth + 1] in protected or depth < 1:
                break
        _drop(parent, part, parent_node)


def _step(container: Any, part: str, node: Node) -> tuple[Any, Node]:
    if part.startswith("f:") and isinstance(container, Mapping):
        return container.get(part[2:], _MISSING), node.child(part[2:]) or ANY
    if isinstance(container, list):
        for index, item in enumerate(container):
            if item_key(item, node, index) == part:
                return item, node.items()
    return _MISSING, ANY


def _drop(container: Any, part: str, node: Node) -> None:
    if part.startswith("f:") and isinstance(container, dict):
        container.pop(part[2:], None)
    elif isinstance(container, list):
        container[:] = [item for i, item in enumerate(container) if item_key(item, node, i) != part]


def _key_of_item(path: Path) -> bool:
    return len(path) > 1 and path[-2].startswith("k:") and path[-1][2:] in json.loads(path[-2][2:])


def _ancestors(paths: Iterable[Path]) -> set[Path]:
    return {path[:i] for path in paths for i in range(1, len(path))}


def format_path(path: Path) -> str:
    """How a real server shows a path in conflicts: ``.spec.containers[name="c"].image``."""
    text = ""
    for part in path:
        kind, value = part[:2], part[2:]
        if kind == "f:":
            text += f".{value}"
        elif kind == "k:":
            keys = json.loads(value)
            text += "[" + ",".join(f"{k}={json.dumps(v)}" for k, v in keys.items()) + "]"
        elif kind == "v:":
            text += f"[={value}]"
        else:
            text += f"[{value}]"
    return text


# -- apply and update ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ApplyTarget:
    """Who applies what to which object, for messages and ``managedFields``."""

    manager: str
    api_version: str
    subresource: str
    separate_status: bool
    plural: str
    group: str
    name: str
    schema: Node | None = None


def apply(
    live: Mapping[str, Any] | None, config: Mapping[str, Any], target: ApplyTarget, *, force: bool, now: str
) -> dict[str, Any]:
    """Server-side apply of ``config`` onto ``live`` (``None`` when the object is being created).

    ``config`` is the apply's own (the engine parses or clones a request's body for each try):
    its parts go into the result as they are, not copied again."""
    root = target.schema or ANY
    entries = parse_entries(live)
    key = (target.manager, "Apply", target.subresource)
    mine = next((e for e in entries if (e.manager, e.operation, e.subresource) == key), None)
    others = [e for e in entries if e is not mine and e.subresource == target.subresource]
    applied = scoped(config, target.subresource, target.separate_status)
    wanted = owned_by_apply(flatten(applied, root))

    # (live's managedFields are not copied: the entries parsed above replace them at the end)
    result: dict[str, Any] = _clone_without_managed_fields(live) if live is not None else {}
    # With no other manager in this scope there is nothing to conflict with (the usual case).
    before = flatten(scoped(result, target.subresource, target.separate_status), root) if others else {}
    for name, value in applied.items():
        merged = merge(result.get(name), value, root.child(name) or ANY)
        if merged is None:
            result.pop(name, None)
        else:
            result[name] = merged
    owned_by_others = set().union(*(e.paths for e in others)) if others else set()
    protected = _ancestors(owned_by_others) | _ancestors(wanted) | owned_by_others
    for path in sorted((mine.paths if mine else set()) - wanted - owned_by_others, key=len, reverse=True):
        if not _key_of_item(path):  # (a key field goes with its item)
            remove_path(result, path, root, protected)
    after = flatten(scoped(result, target.subresource, target.separate_status), root) if others else {}

    changed = changes(before, after)
    conflicts: dict[str, list[str]] = {}
    for entry in others:
        clashing = changed & entry.paths
        if clashing:
            conflicts.setdefault(entry.who(), []).extend(format_path(p) for p in sorted(clashing))
            if force:
                entry.paths -= clashing
    if conflicts and not force:
        raise errors.apply_conflict(target.plural, target.group, target.name, conflicts)

    if mine is None:
        mine = Entry(target.manager, "Apply", target.subresource, target.api_version, now)
        entries.append(mine)
    mine.paths, mine.api_version, mine.time = wanted, target.api_version, now
    if others:
        _forget_missing(entries, after, target)
    _store_entries(result, entries)
    return result


def _clone_without_managed_fields(obj: Mapping[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping) or "managedFields" not in meta:
        return clone(obj)
    return clone({**obj, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}})


def record_update(
    old: Mapping[str, Any] | None, new: dict[str, Any], target: ApplyTarget, *, now: str
) -> None:
    """Give ``target.manager`` (as an Update) what ``new`` adds and changes; others lose it."""
    root = target.schema or ANY
    # A request that sets managedFields (a JSON patch of them, an update carrying other ones)
    # replaces them, as the API server's field manager takes the request's over the stored ones;
    # the fields it changes besides are then recorded on top.
    asked = (new.get("metadata") or {}).get("managedFields")
    entries = parse_entries(
        new if asked and asked != ((old or {}).get("metadata") or {}).get("managedFields") else old
    )
    before = flatten(scoped(old, target.subresource, target.separate_status), root) if old is not None else {}
    after = flatten(scoped(new, target.subresource, target.separate_status), root)
    changed = changes(before, after)
    if changed:
        key = (target.manager, "Update", target.subresource)
        mine = next((e for e in entries if (e.manager, e.operation, e.subresource) == key), None)
        for entry in entries:
            if entry.subresource == target.subresource:
                entry.paths -= changed
        if mine is None:
            mine = Entry(target.manager, "Update", target.subresource, target.api_version, now)
            entries.append(mine)
        mine.paths |= changed & after.keys()
        mine.api_version, mine.time = target.api_version, now
    _forget_missing(entries, after, target)
    _store_entries(new, entries)


def _forget_missing(entries: list[Entry], present: Mapping[Path, Any], target: ApplyTarget) -> None:
    """Nobody owns a field of this scope that is not there any more."""
    for entry in entries:
        if entry.subresource == target.subresource:
            entry.paths &= present.keys()
