"""What one reconcile carries from step to step, and how its outcome becomes a Kyma status.

Steps record conditions and module states here; nothing is written to the database until the
engine compares the result with the stored status at the end (one write, or none).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fleet import maintenance
from fleet.k8s.client import ObjectKey, RuntimeClient
from fleet.models import Kyma, KymaState, Module, RuntimeSync
from fleet.models.bookkeeping import row_or_default
from fleet.models.records import CHANGES_KEPT
from fleet.rollouts.targets import KymaTargets
from kernel.timefmt import rfc3339

TRUE, FALSE, UNKNOWN = "True", "False", "Unknown"
CONDITION_TYPES = ("Runtime", "SKRWebhook", "ModuleCatalog", "Modules", "SyncResources", "WatcherHeartbeat")
# Conditions whose False makes the Kyma Warning rather than Processing: the runtime is in sync, but
# something needs attention (e.g. a silent runtime watcher).
WARNING_CONDITIONS = frozenset({"WatcherHeartbeat"})


KUBECONFIG_KEY = "@kubeconfig"


class LeaseLost(Exception):
    """Another worker took over this Kyma (our lease expired): stop without writing."""


@dataclass
class ModuleOutcome:
    """One module after this reconcile. ``resource`` locates its CR ({apiVersion, kind, name,
    namespace}); ``generation`` is the CR's as read (0 when it does not exist)."""

    name: str
    state: str
    channel: str = ""
    version: str = ""
    message: str = ""
    resource: dict[str, Any] | None = None
    policy: str = ""
    generation: int = 0
    maintenance: bool = False  # a new version waits for the runtime's maintenance window

    def status(self) -> dict[str, Any]:
        """The entry of upstream's ``status.modules`` (its CRD's fields only)."""
        entry: dict[str, Any] = {"name": self.name, "state": self.state}
        for key in ("channel", "version", "message", "maintenance"):
            if getattr(self, key):
                entry[key] = getattr(self, key)
        if self.resource:
            metadata: dict[str, Any] = {"name": self.resource["name"]}
            if self.resource.get("namespace"):
                metadata["namespace"] = self.resource["namespace"]
            if self.generation:
                metadata["generation"] = self.generation
            entry["resource"] = {
                "apiVersion": self.resource["apiVersion"],
                "kind": self.resource["kind"],
                "metadata": metadata,
            }
        return entry

    @property
    def owns_resource(self) -> bool:
        """Whether the control plane deletes this module's CR when the module (or the Kyma) goes."""
        return bool(self.resource) and (self.policy or "CreateAndDelete") == "CreateAndDelete"


@dataclass
class Ahead:
    """Calls a later step of the reconcile will make, registered early so that a wave of writes
    with room for them makes them at once (``reconciler.apply``: they ride along). ``docs``:
    objects never seen in this runtime, to apply (each with the step that owns it); ``reads``:
    reads, each with its step, whose results the caller keeps itself (a kind's discovery in the
    client's cache) or that read an object again, whose answer the wave keeps on
    :attr:`ReconcileContext.listed`. A step drops what is still pending of its own when it starts
    (it makes those calls itself then); ``applied``: the objects applied so, which their step does
    not check again."""

    # (step, doc, the keys of docs that must have been applied so first: a CRD before its objects)
    docs: list[tuple[str, dict[str, Any], frozenset]] = field(default_factory=list)
    # (step, the key of the object it reads again, whose answer is kept on ``listed``, or None; the read)
    reads: list[tuple[str, ObjectKey | None, Callable[[], object]]] = field(default_factory=list)
    applied: set[tuple[str, str, str, str]] = field(default_factory=set)  # docs' keys, once applied

    def drop(self, step: str) -> None:
        self.docs = [entry for entry in self.docs if entry[0] != step]
        self.reads = [entry for entry in self.reads if entry[0] != step]

    def take(
        self, room: int
    ) -> tuple[list[dict[str, Any]], list[tuple[ObjectKey | None, Callable[[], object]]]]:
        """Up to ``room`` of the pending calls (reads first: they cost the runtime least; docs
        whose prerequisites were applied), taken."""
        reads, self.reads = self.reads[:room], self.reads[room:]
        docs: list[dict[str, Any]] = []
        left = []
        for entry in self.docs:
            if len(reads) + len(docs) < room and entry[2] <= self.applied:
                docs.append(entry[1])
            else:
                left.append(entry)
        self.docs = left
        return docs, [(key, read) for _, key, read in reads]

    def __bool__(self) -> bool:
        return bool(self.docs or self.reads)


@dataclass
class ReconcileContext:
    kyma: Kyma
    now: dt.datetime
    client: RuntimeClient | None = None
    conditions: dict[str, tuple[str, str, str]] = field(default_factory=dict)
    modules: list[ModuleOutcome] = field(default_factory=list)
    mandatory: list[ModuleOutcome] = field(default_factory=list)  # not in the Kyma's status (upstream)
    owned_left: dict[str, dict[str, Any]] | None = None  # a deletion: module CRs still there
    changed_configs: list[int] = field(default_factory=list)  # whose managers are notified
    runtime_kyma: dict[str, Any] | None = None  # the runtime's Kyma as its step read it (None: not read)
    fatal: str = ""  # a reason that makes the whole Kyma Error (unreachable, no kubeconfig, ...)
    messages: list[str] = field(default_factory=list)
    heartbeat: Any = None  # callable extending the lease between steps
    lease_owner: str = ""  # the lease this reconcile holds: the final status write releases it
    remote_kyma: dict[str, Any] | None = None  # the runtime's Kyma as the reconcile left it
    remote_kyma_unread: bool = False  # not read: known unchanged (its status is mirrored blind)
    # A periodic reconcile with a live runtime watcher: what the watcher's events cover (the
    # runtime's Kyma, module CRs) is known unchanged since it was last verified (engine).
    events_trusted: bool = False
    # Every request said what changed: what no event covers waits for beat's sweep (engine).
    targeted: bool = False
    # Read and repair every kind the control plane owns in the runtime, whatever was verified
    # when (a user's "reconcile now", a spec change, an event about the control plane's objects).
    full: bool = True
    named: set[tuple[str, str, str, str]] = field(default_factory=set)  # objects its events named
    dropped: set[str] = field(default_factory=set)  # condition types that no longer apply
    recheck_at: dt.datetime | None = None  # reconcile again no later than this
    # What this reconcile changed, for its record and the Kyma's timeline (fleet.models.records).
    changes: list[dict[str, Any]] = field(default_factory=list)
    drift: list[dict[str, str]] = field(default_factory=list)  # objects corrected: kind, namespace, name
    listed: dict[tuple[str, str, str, str], dict[str, Any] | None] = field(default_factory=dict)
    verified: dict[str, list] = field(default_factory=dict)  # RuntimeSync.runtime_verified, as it becomes
    same_cluster: bool = False  # what RuntimeSync.runtime_verified says was seen in this very cluster
    # What the reconciler last synced with this runtime (written by the steps, and at the end)
    sync: RuntimeSync = field(init=False)
    synced_watchers: list = field(init=False)  # RuntimeSync.applied_watchers as read
    # A batch's reads (reconciler.shared): the catalog, Watchers, CA bundle, this Kyma's
    # certificate, ModuleConfigs and SyncResources, read once for every Kyma of the batch.
    shared: Any = None
    ahead: Ahead = field(default_factory=Ahead)  # calls of later steps made with an earlier wave
    # What a step rendered, by the step's name, for its own later use in this reconcile (the
    # catalog's mirror: its ``ahead`` renders it, its sync applies it). A context is one reconcile
    # of one runtime: nothing kept here outlives it.
    rendered: dict[str, Any] = field(default_factory=dict)
    _catalog: dict[str, Module] | None = None
    _targets: KymaTargets | None = None
    _window: maintenance.WindowState | None = None

    def __post_init__(self) -> None:
        # Only valid for the cluster it was seen in: another kubeconfig starts from nothing.
        cluster = self.kyma.kubeconfig.digest()[:16] if self.kyma.kubeconfig else ""
        self.sync = row_or_default(self.kyma, "runtime_sync")
        self.synced_watchers = list(self.sync.applied_watchers or [])
        stored = self.sync.runtime_verified or {}
        self.same_cluster = stored.get(KUBECONFIG_KEY) == cluster
        self.verified = dict(stored) if self.same_cluster else {KUBECONFIG_KEY: cluster}

    def catalog(self) -> dict[str, Module]:
        """The module catalog by name, read once per reconcile (tens of rows): the watcher's
        module-CR webhook and the module step both use it, so it costs one query, not two."""
        if self._catalog is None:
            self._catalog = (
                self.shared.catalog()
                if self.shared is not None
                else {module.name: module for module in Module.objects.all()}
            )
        return self._catalog

    @property
    def targets(self) -> KymaTargets:
        """This runtime's own targets where a rollout holds a subject (``fleet.rollouts.targets``)."""
        if self._targets is None:
            self._targets = KymaTargets(self.kyma)
        return self._targets

    def window(self) -> maintenance.WindowState:
        """The runtime's maintenance window now (read once, only when a version needs it)."""
        if self._window is None:
            self._window = maintenance.window_of(self.kyma, self.now)
        return self._window

    def module_cr_kinds(self) -> list[tuple[str, str, str]]:
        """``(group, version, plural)`` of every module CR kind in the catalog, sorted."""
        found = {(m.cr_group, m.cr_version, m.cr_plural) for m in self.catalog().values() if m.cr_plural}
        return sorted(found)

    def condition(self, type_: str, status: str, reason: str, message: str = "") -> None:
        self.conditions[type_] = (status, reason, message)
        self.dropped.discard(type_)

    def change(self, kind: str, **details: Any) -> None:
        """Note one change for the timeline: ``ctx.change("spec", field="channel", before=..., after=...)``.

        Any ``kind`` is accepted (the pages render unknown kinds by their ``text`` or fields)."""
        if len(self.changes) < CHANGES_KEPT:
            self.changes.append({"kind": kind, **details})
        elif len(self.changes) == CHANGES_KEPT:
            self.changes.append({"kind": "more", "text": "more changes not listed"})

    def keep_condition(self, type_: str) -> bool:
        """Carry a condition over from the stored status unchanged (this reconcile did not look
        again); False when the status has none."""
        for stored in self.kyma.conditions:
            if stored.get("type") == type_:
                self.condition(
                    type_, stored.get("status", UNKNOWN), stored.get("reason", ""), stored.get("message", "")
                )
                return True
        return False

    def stored_condition_true(self, type_: str) -> bool:
        return any(c.get("type") == type_ and c.get("status") == TRUE for c in self.kyma.conditions)

    def drop_condition(self, type_: str) -> None:
        """Remove a condition from the status (what it watched is gone)."""
        self.conditions.pop(type_, None)
        self.dropped.add(type_)

    def recheck(self, at: dt.datetime) -> None:
        """Ask for the next reconcile no later than ``at`` (e.g. when a grace period ends)."""
        self.recheck_at = at if self.recheck_at is None else min(self.recheck_at, at)

    def step(self) -> None:
        """Between steps: keep the lease, or stop if it was lost."""
        if self.heartbeat is not None and not self.heartbeat():
            raise LeaseLost(f"lease of Kyma {self.kyma.key} lost")

    @property
    def runtime_writes(self) -> int:
        return self.client.counts.writes if self.client is not None else 0


def derive_state(ctx: ReconcileContext) -> str:
    """Upstream's rule, plus errors of our own: any module Error, or a fatal problem → Error; any
    module Warning → Warning; any module Processing or any condition not True → Processing; a
    warning condition (``WARNING_CONDITIONS``) False → Warning; else Ready."""
    if ctx.kyma.is_deleting:
        return KymaState.ERROR if ctx.fatal else KymaState.DELETING
    states = {m.state for m in ctx.modules}
    if ctx.fatal or KymaState.ERROR in states:
        return KymaState.ERROR
    if KymaState.WARNING in states:
        return KymaState.WARNING
    others = [status for type_, (status, _, _) in ctx.conditions.items() if type_ not in WARNING_CONDITIONS]
    if KymaState.PROCESSING in states or any(status != TRUE for status in others):
        return KymaState.PROCESSING
    if any(ctx.conditions[type_][0] == FALSE for type_ in WARNING_CONDITIONS & ctx.conditions.keys()):
        return KymaState.WARNING
    return KymaState.READY


def merged_conditions(previous: list[dict], ctx: ReconcileContext, generation: int) -> list[dict]:
    """New conditions, keeping ``lastTransitionTime`` when a status did not change, and keeping
    conditions this reconcile could not evaluate (e.g. the runtime was unreachable)."""
    by_type = {c["type"]: c for c in previous if c["type"] not in ctx.dropped}
    timestamp = rfc3339(ctx.now)
    for type_, (status, reason, message) in ctx.conditions.items():
        old = by_type.get(type_)
        since = old["lastTransitionTime"] if old and old.get("status") == status else timestamp
        by_type[type_] = {
            "type": type_,
            "status": status,
            "reason": reason,
            "message": message,
            "lastTransitionTime": since,
            "observedGeneration": generation,
        }
    order = {name: index for index, name in enumerate(CONDITION_TYPES)}
    return sorted(by_type.values(), key=lambda c: (order.get(c["type"], 99), c["type"]))


def comparable(conditions: list[dict]) -> list[tuple]:
    return [(c["type"], c["status"], c.get("reason", ""), c.get("message", "")) for c in conditions]
