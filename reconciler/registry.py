"""The registry of runtime steps: what the control plane owns in a runtime, each kind declared once.

kopf's handler registry is the model: a step declares everything the rest of the system needs
about the kinds it owns, and the engine, the deletion, the runtime-access rules and the docs read
the declaration instead of listing kinds by hand (:mod:`.steps` holds the declarations):

- **render**: the objects it wants in the runtime for a Kyma (stamped with their content hash);
- **sync**: read, compare and repair them (drift is compared field by field, :mod:`.drift`);
- **remove**: delete them when the Kyma goes, returning what is still there (a finalizer holds
  it: the deletion waits for it, and purges it after ``KYMA_PURGE_AFTER``, :mod:`.deletion`);
- for each kind (:class:`OwnedKind`): when it is **read** (:class:`Read`), how drift is
  **repaired**, when it is **deleted**, the **access** (RBAC rules) the control plane's identity
  needs for it (:mod:`.access` renders ``deploy/runtime-access/`` from them), whether the runtime
  watcher reports its changes, and the **docs** row that describes it (``make docs`` renders
  the table on "Access to runtimes").

:func:`missing_parts` says what a declaration lacks; a test fails when it finds anything.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .context import ReconcileContext

READ = ("get", "list", "watch")
WRITE = ("create", "patch", "update", "delete")


class Read(enum.StrEnum):
    """When a reconcile reads a kind (every full reconcile reads every kind)."""

    EVERY = "every reconcile"  # breaks events or the watcher at once when changed
    RECHECKED = "rechecked"  # every RUNTIME_RECHECK_INTERVAL, at once when the watcher reports a change
    EVENTS = "on events"  # the runtime watcher reports every change of it; read when one names it
    CREATED = "when missing"  # created when found missing (with the runtime's Kyma), never changed


@dataclass(frozen=True)
class Rule:
    """One RBAC rule the control plane's identity needs in a runtime: in the namespace it
    manages (``kyma-system``), or cluster-wide (``cluster``), for these ``names`` only when given."""

    group: str
    resources: tuple[str, ...]
    verbs: tuple[str, ...]
    names: tuple[str, ...] = ()
    cluster: bool = False

    def as_rbac(self) -> dict[str, Any]:
        rule: dict[str, Any] = {"apiGroups": [self.group], "resources": list(self.resources)}
        if self.names:
            rule["resourceNames"] = list(self.names)
        rule["verbs"] = list(self.verbs)
        return rule


@dataclass(frozen=True)
class OwnedKind:
    """A kind of object the control plane owns in every runtime.

    ``names``: the objects' names when they are fixed (``()``: any name, e.g. one per module);
    ``watched``: the runtime watcher reports an update or deletion of them (its webhook for owned
    objects, ``watchers.rendering``), so the drift is repaired at once, not at the next recheck.
    """

    api_version: str
    kind: str
    plural: str
    namespaced: bool
    read: Read
    repair: str  # how drift is repaired (docs)
    deleted: str  # when it leaves the runtime (docs)
    description: str  # what it is (docs)
    access: tuple[Rule, ...]
    names: tuple[str, ...] = ()
    watched: bool = False

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]

    def specificity(self) -> tuple[bool, bool]:
        """Sorts the declarations an object matches: by name first, then by kind, then any."""
        return (not self.names, self.kind == "*")

    def matches(self, api_version: str, kind: str, name: str | None = None) -> bool:
        """Whether an object is of this declaration (``kind`` ``*``: any kind of its API group;
        with fixed ``names``, only those)."""
        if self.kind == "*":
            same = api_version.rpartition("/")[0] == self.group
        else:
            same = (api_version, kind) == (self.api_version, self.kind)
        return same and (name is None or not self.names or name in self.names)

    @property
    def version(self) -> str:
        return self.api_version.rpartition("/")[2]


@dataclass(frozen=True)
class RuntimeStep:
    """One step of a reconcile and of a deletion, and the kinds it owns (see the module docstring).

    ``order``: its place in a reconcile (lower first); ``removal``: in a deletion (lower first).
    ``remove`` returns the objects still in the runtime after their deletion was asked for
    (``(apiVersion, kind, namespace, name)``: a finalizer holds them). ``ahead``, when given,
    registers calls of the step that need nothing the steps before it make, so that one of their
    waves makes them at once (a runtime is far away: each wave is a round trip)."""

    name: str
    summary: str
    kinds: tuple[OwnedKind, ...]
    render: Callable[[ReconcileContext], list[dict[str, Any]]]
    sync: Callable[[ReconcileContext], None]
    remove: Callable[[ReconcileContext], list[tuple[str, str, str, str]]]
    order: int
    removal: int
    # Registers calls the step will make that may go earlier, with another step's wave
    # (``reconciler.apply.apply_ahead``, ``read_ahead``): run before the first step.
    ahead: Callable[[ReconcileContext], None] | None = None

    def kind_of(self, api_version: str, kind: str, name: str | None = None) -> OwnedKind | None:
        """The declaration of an object (fixed names first: a kind may be declared by name in one
        step and for any other name in another, e.g. the watcher's Secret and manifests' ones)."""
        found = [k for k in self.kinds if k.matches(api_version, kind, name)]
        return min(found, key=OwnedKind.specificity, default=None)


@dataclass(frozen=True)
class Registry:
    steps: tuple[RuntimeStep, ...]

    def in_order(self) -> list[RuntimeStep]:
        return sorted(self.steps, key=lambda s: s.order)

    def in_removal_order(self) -> list[RuntimeStep]:
        return sorted(self.steps, key=lambda s: s.removal)

    def kinds(self) -> list[tuple[RuntimeStep, OwnedKind]]:
        return [(step, kind) for step in self.in_order() for kind in step.kinds]

    def owner_of(self, api_version: str, kind: str, name: str | None = None) -> RuntimeStep | None:
        """The step that owns this object (fixed names first), or ``None``."""
        found = [(s, k) for s in self.in_order() if (k := s.kind_of(api_version, kind, name)) is not None]
        return min(found, key=lambda found: found[1].specificity(), default=(None, None))[0]

    def watched(self) -> list[OwnedKind]:
        """The kinds whose changes the runtime watcher reports (its webhook for owned objects)."""
        return [kind for _, kind in self.kinds() if kind.watched]

    def rules(self, *, cluster: bool) -> list[dict[str, Any]]:
        """Every kind's rules of one scope as few RBAC rules: the same group, verbs and names
        merge their resources; named rules of one resource and verbs merge their names; a ``*``
        among a group's resources stands for all of them."""
        return merged_rules(
            rule for _, kind in self.kinds() for rule in kind.access if rule.cluster == cluster
        )


def merged_rules(rules: Iterable[Rule]) -> list[dict[str, Any]]:
    """See :meth:`Registry.rules` (first-seen order, so the rendered YAML is stable)."""
    named: dict[tuple[str, tuple[str, ...], tuple[str, ...]], list[str]] = {}
    plain: dict[tuple[str, tuple[str, ...]], list[str]] = {}
    order: list[tuple[str, tuple]] = []
    for rule in rules:
        if rule.names:
            key = (rule.group, rule.resources, rule.verbs)
            if key not in named:
                named[key] = []
                order.append(("named", key))
            named[key] += [n for n in rule.names if n not in named[key]]
        else:
            key2 = (rule.group, rule.verbs)
            if key2 not in plain:
                plain[key2] = []
                order.append(("plain", key2))
            plain[key2] += [r for r in rule.resources if r not in plain[key2]]
    found = []
    for what, key in order:
        if what == "named":
            group, resources, verbs = key
            found.append(Rule(group, resources, verbs, tuple(named[key])).as_rbac())
        else:
            group, verbs = key
            resources = ("*",) if "*" in plain[key] else tuple(plain[key])
            found.append(Rule(group, resources, verbs).as_rbac())
    return found


def missing_parts(steps: Sequence[RuntimeStep]) -> list[str]:
    """What each declaration lacks (empty when every step and kind says all it must)."""
    found = []
    declared: list[tuple[str, OwnedKind]] = []
    for step in steps:
        for part in ("render", "sync", "remove"):
            if not callable(getattr(step, part, None)):
                found.append(f"step {step.name}: no {part} function")
        if not step.summary:
            found.append(f"step {step.name}: no summary for the docs")
        if not step.kinds:
            found.append(f"step {step.name}: declares no kind")
        for kind in step.kinds:
            what = f"step {step.name}, kind {kind.kind}"
            for other_step, other in declared:
                same = (other.api_version, other.kind) == (kind.api_version, kind.kind)
                if same and (not (kind.names or other.names) or set(kind.names) & set(other.names)):
                    found.append(f"{what}: declared by step {other_step} too (the same names)")
            declared.append((step.name, kind))
            for part in ("plural", "repair", "deleted", "description"):
                if not getattr(kind, part):
                    found.append(f"{what}: no {part}")
            if not isinstance(kind.read, Read):
                found.append(f"{what}: no read mode")
            if not kind.access:
                found.append(f"{what}: no access rules")
            for rule in kind.access:
                if not rule.verbs or not rule.resources:
                    found.append(f"{what}: an access rule without verbs or resources")
                elif kind.plural in rule.resources and rule.cluster == kind.namespaced:
                    found.append(f"{what}: its rule for {kind.plural} is not of the kind's scope")
            if not any(kind.plural in r.resources or "*" in r.resources for r in kind.access):
                found.append(f"{what}: no access rule names {kind.plural}")
            if kind.watched and kind.read is Read.EVERY:
                found.append(f"{what}: watched, although read every reconcile")
    return found
