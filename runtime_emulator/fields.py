"""Managed fields and server-side apply.

Ownership is tracked per field manager as a set of leaf paths (``('spec', 'replicas')``) and
stored on the object as ``metadata.managedFields`` entries in the real ``FieldsV1`` encoding,
so clients read the same structure they would read from a real cluster.

Simplifications, chosen to keep the semantics controllers rely on:

* every list is atomic (owned and replaced as a whole; no ``k:{...}`` list-map keys);
* ``apiVersion``, ``kind`` and server-set metadata are not tracked; of metadata only ``labels``,
  ``annotations``, ``finalizers`` and ``ownerReferences`` are;
* for resources with a ``status`` subresource, ``status`` belongs to the ``status`` scope.

What holds, as on a real server: an apply removes the fields its manager applied before and no
longer applies, unless another manager also owns them; changing a field another manager owns
with a different value is a conflict (409) unless ``force=true``, which transfers ownership;
an update (PUT/merge/JSON patch) takes ownership of the fields it changes away from everyone.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from runtime_emulator import errors
from runtime_emulator.patches import clone, merge_patch

Path = tuple[str, ...]
TRACKED_METADATA = ("labels", "annotations", "finalizers", "ownerReferences")
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

    def render(self) -> dict[str, Any]:
        """The entry as it appears in ``metadata.managedFields``."""
        rendered: dict[str, Any] = {
            "manager": self.manager,
            "operation": self.operation,
            "apiVersion": self.api_version,
            "time": self.time,
            "fieldsType": "FieldsV1",
            "fieldsV1": encode(self.paths),
        }
        if self.subresource:
            rendered["subresource"] = self.subresource
        return rendered


def encode(paths: Iterable[Path]) -> dict[str, Any]:
    """Leaf paths → ``FieldsV1`` (``{'f:spec': {'f:replicas': {}}}``)."""
    root: dict[str, Any] = {}
    for path in sorted(paths):
        node = root
        for part in path:
            node = node.setdefault(f"f:{part}", {})
    return root


def decode(node: Mapping[str, Any], prefix: Path = ()) -> set[Path]:
    """``FieldsV1`` → leaf paths (list keys of real servers are ignored: lists are atomic here)."""
    paths: set[Path] = set()
    for key, child in node.items():
        if not key.startswith("f:"):
            continue
        path = (*prefix, key[2:])
        if isinstance(child, Mapping) and any(k.startswith("f:") for k in child):
            paths |= decode(child, path)
        else:
            paths.add(path)
    return paths


def parse_entries(obj: Mapping[str, Any] | None) -> list[Entry]:
    """The managed-fields entries of an object (none for ``None``)."""
    raw = ((obj or {}).get("metadata") or {}).get("managedFields") or ()
    return [
        Entry(
            e.get("manager", ""),
            e.get("operation", "Update"),
            e.get("subresource", ""),
            e.get("apiVersion", ""),
            e.get("time", ""),
            decode(e.get("fieldsV1") or {}),
        )
        for e in raw
    ]


def _store_entries(obj: dict[str, Any], entries: list[Entry]) -> None:
    kept = [e.render() for e in entries if e.paths]
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


def leaves(obj: Mapping[str, Any], subresource: str, separate_status: bool) -> dict[Path, Any]:
    """Leaf path → value for every field of the scope (empty maps and lists are leaves)."""
    out: dict[Path, Any] = {}

    def walk(value: Any, path: Path) -> None:
        if isinstance(value, Mapping) and value:
            for key, child in value.items():
                walk(child, (*path, key))
        else:
            out[path] = value

    for key, value in scoped(obj, subresource, separate_status).items():
        walk(value, (key,))
    return out


def get_path(obj: Any, path: Path) -> Any:
    """The value at ``path``, or a private sentinel when absent."""
    for part in path:
        if not isinstance(obj, Mapping) or part not in obj:
            return _MISSING
        obj = obj[part]
    return obj


def _ancestors(paths: Iterable[Path]) -> set[Path]:
    return {path[:i] for path in paths for i in range(1, len(path))}


def remove_path(obj: dict[str, Any], path: Path, protected: set[Path]) -> None:
    """Delete a field and the maps it leaves empty (but never top-level keys or owned maps)."""
    containers = [obj]
    for part in path[:-1]:
        child = containers[-1].get(part)
        if not isinstance(child, dict):
            return
        containers.append(child)
    containers[-1].pop(path[-1], None)
    for depth in range(len(path) - 1, 1, -1):
        if containers[depth] or path[:depth] in protected:
            break
        containers[depth - 1].pop(path[depth - 1], None)


def _overlapping(path: Path, owned: set[Path]) -> Iterator[Path]:
    for other in owned:
        shorter = min(len(path), len(other))
        if path[:shorter] == other[:shorter]:
            yield other


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


def apply(
    live: Mapping[str, Any] | None, config: Mapping[str, Any], target: ApplyTarget, *, force: bool, now: str
) -> dict[str, Any]:
    """Server-side apply of ``config`` onto ``live`` (``None`` when the object is being created)."""
    entries = parse_entries(live)
    key = (target.manager, "Apply", target.subresource)
    applied = leaves(config, target.subresource, target.separate_status)
    wanted = {path for path, value in applied.items() if value is not None}
    result: dict[str, Any] = clone(live) if live is not None else {}
    mine = next((e for e in entries if (e.manager, e.operation, e.subresource) == key), None)
    others = [e for e in entries if e is not mine and e.subresource == target.subresource]

    conflicts: dict[str, list[str]] = {}
    for entry in others:
        for path in sorted(wanted):
            value = applied[path]
            if get_path(result, path) == value or isinstance(value, Mapping):
                continue  # same value (or an empty map, merged in): ownership is shared, not contested
            clashing = list(_overlapping(path, entry.paths))
            if clashing:
                conflicts.setdefault(entry.manager, []).append("." + ".".join(path))
                if force:
                    entry.paths.difference_update(clashing)
    if conflicts and not force:
        raise errors.apply_conflict(target.plural, target.group, target.name, conflicts)

    owned_by_others = set().union(*(e.paths for e in others)) if others else set()
    protected = _ancestors(owned_by_others) | _ancestors(wanted)
    stale = (mine.paths if mine else set()) - wanted - owned_by_others
    for path in stale | {p for p, v in applied.items() if v is None}:
        remove_path(result, path, protected)
    result = merge_patch(result, clone(scoped(config, target.subresource, target.separate_status)))

    if mine is None:
        mine = Entry(target.manager, "Apply", target.subresource, target.api_version, now)
        entries.append(mine)
    mine.paths, mine.api_version, mine.time = wanted, target.api_version, now
    _store_entries(result, entries)
    return result


def record_update(
    old: Mapping[str, Any] | None, new: dict[str, Any], target: ApplyTarget, *, now: str
) -> None:
    """Give ``target.manager`` (as an Update) the fields ``new`` changes; others lose them."""
    entries = parse_entries(old)
    before = leaves(old, target.subresource, target.separate_status) if old is not None else {}
    after = leaves(new, target.subresource, target.separate_status)
    changed = {path for path, value in after.items() if before.get(path, _MISSING) != value}
    removed = before.keys() - after.keys()
    if changed or removed:
        key = (target.manager, "Update", target.subresource)
        mine = next((e for e in entries if (e.manager, e.operation, e.subresource) == key), None)
        for entry in entries:
            if entry.subresource == target.subresource:
                entry.paths -= changed
                entry.paths -= removed
        if mine is None:
            mine = Entry(target.manager, "Update", target.subresource, target.api_version, now)
            entries.append(mine)
        mine.paths |= changed
        mine.api_version, mine.time = target.api_version, now
    _store_entries(new, entries)
