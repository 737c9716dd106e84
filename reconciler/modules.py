"""Modules in a runtime: their custom resources, ModuleConfigs for the managers, and states.

For each module enabled in the Kyma: the catalog says which CR it has and which version the
channel gives. With policy CreateAndDelete the control plane creates the default CR when it is
missing (and deletes it when the module is removed); either way the CR's spec is copied into the
module's ModuleConfig, whose revision moves only on a real change (and then the module's manager
is notified). The module's state comes from its manager's report (ModuleConfig status), else from
the CR's ``status.state``, else it is Processing.

A reconcile that trusts the runtime watcher's events (``ctx.events_trusted``: its ``module-crs``
webhook reports every change of a module CR's spec) does not read a CR seen in place less than
``RUNTIME_RECHECK_INTERVAL`` ago, unless one of its events named it, when the module's manager
reported its state: the ModuleConfig then says all the outcome needs. A state taken from the
CR's own status is read every time (status changes are not reported).
"""

from __future__ import annotations

import datetime as dt
import functools
from dataclasses import dataclass
from typing import Any

from fleet.k8s.client import Exists, Gone
from fleet.k8s.ownership import MANAGED_BY
from fleet.models import KymaState, Module, ModuleConfig, SyncResource
from fleet.models.module import MANDATORY_LABEL, highest, version_key
from fleet.services import modules as module_services
from kernel.documents.hashing import document_hash
from kernel.services import deletion_begin
from kernel.timefmt import display

from .apply import key_of, note_seen, read, read_ahead, resource_name, verified_recently
from .context import FALSE, TRUE, ModuleOutcome, ReconcileContext

STEP = "modules"  # (its name in the registry: reconciler.steps)


def module_resource(module: Module, kyma_runtime_id: str) -> dict[str, Any]:
    """The module's default CR as the control plane creates it in one runtime: with its labels."""
    doc = module.default_cr_object()
    doc["metadata"]["labels"] = {
        **doc["metadata"].get("labels", {}),
        **MANAGED_BY,
        "operator.kyma-project.io/module-name": module.name,
        "kyma-project.io/runtime-id": kyma_runtime_id,
        **({MANDATORY_LABEL: "true"} if module.mandatory else {}),
    }
    return doc


def _tracking(doc: dict[str, Any]) -> dict[str, Any]:
    meta = doc["metadata"]
    return {
        "apiVersion": doc["apiVersion"],
        "kind": doc["kind"],
        "name": meta["name"],
        "namespace": meta.get("namespace", ""),
    }


def _state_of(config: ModuleConfig | None, live: dict[str, Any]) -> tuple[str, str]:
    reported = (config.status if config else {}) or {}
    if reported.get("state"):
        return reported["state"], reported.get("message", "")
    observed = (live.get("status") or {}).get("state")
    if observed in KymaState.values and observed:
        return observed, ""
    return KymaState.PROCESSING, "waiting for the module to report its state"


def sync(ctx: ReconcileContext) -> list[int]:
    """Reconcile every module of the Kyma, and every mandatory module of the catalog; returns ids
    of ModuleConfigs that changed whose manager gets notifications (:attr:`Module.notifies`; the
    others watch or poll)."""
    kyma = ctx.kyma
    entries = kyma.module_entries()
    catalog = ctx.catalog()
    found = (
        ctx.shared.module_configs(kyma)
        if ctx.shared is not None
        else ModuleConfig.objects.filter(kyma=kyma).select_related("module")
    )
    configs = {c.module_id: c for c in found}
    changed: list[int] = []
    missing = []
    for entry in entries:
        name = entry["name"]
        module = catalog.get(name)
        channel = entry.get("channel") or kyma.channel
        if module is None or module.is_deleting:
            missing.append(name)
            ctx.modules.append(
                ModuleOutcome(name, KymaState.ERROR, channel, message="not in the module catalog")
            )
            continue
        if module.mandatory:
            # Upstream finds no template of a mandatory module in any channel: a Warning.
            message = f"{name} is a mandatory module: every runtime gets it, whatever spec.modules says"
            ctx.modules.append(ModuleOutcome(name, KymaState.WARNING, channel, message=message))
            continue
        version = ctx.targets.module_version(module, channel)
        if version is None:
            missing.append(f"{name}@{channel}")
            ctx.modules.append(
                ModuleOutcome(
                    name,
                    KymaState.ERROR,
                    channel,
                    message=f"the catalog has no version of {name} in channel {channel}",
                )
            )
            continue
        if not entry.get("managed", True):
            ctx.modules.append(ModuleOutcome(name, KymaState.READY, channel, version, "not managed"))
            continue
        config = configs.get(module.pk)
        refused = downgrade(ctx, module, channel, version, config)
        if refused is not None:
            version = refused.installed
        version, held = _maintenance(ctx, module, version, config)
        outcome = _one(ctx, module, entry, channel, version, config, changed)
        outcome.policy = entry.get("customResourcePolicy", "CreateAndDelete")
        if held is not None:
            outcome.message = held.message
            if held.waits:
                outcome.maintenance = True
            else:
                outcome.state = KymaState.ERROR
        if refused is not None:  # upstream: the module's last status, as a Warning saying why
            outcome.state, outcome.message, outcome.channel = (
                KymaState.WARNING,
                refused.message,
                refused.channel,
            )
        ctx.modules.append(outcome)
    if missing:
        ctx.condition(
            "ModuleCatalog", FALSE, "ModuleNotInCatalog", "unknown in the catalog: " + ", ".join(missing)
        )
    else:
        ctx.condition("ModuleCatalog", TRUE, "Ready", "every module is in the catalog")
    mandatory = [m for m in catalog.values() if m.mandatory and not m.is_deleting]
    for module in sorted(mandatory, key=lambda m: m.name):
        ctx.mandatory.append(_mandatory(ctx, module, configs.get(module.pk), changed))
    enabled = {e["name"] for e in entries if not (catalog.get(e["name"]) and catalog[e["name"]].mandatory)}
    _remove_dropped(ctx, enabled | {m.name for m in mandatory}, configs)
    bad = [m.name for m in ctx.modules if m.state != KymaState.READY]
    if bad:
        ctx.condition("Modules", FALSE, "ModulesNotReady", "not ready: " + ", ".join(sorted(bad)))
    else:
        ctx.condition("Modules", TRUE, "Ready", "all modules are ready")
    return changed


def _touched(ctx: ReconcileContext) -> list[tuple[Module, dict[str, Any]]]:
    """The catalog's modules whose CRs this Kyma's step may touch, each with the entry it is
    reconciled by: the Kyma's entries (whatever their policy: a CR of policy Ignore is read),
    then the catalog's mandatory modules (the entry :func:`_mandatory` uses), those leaving the
    catalog too (a leaving mandatory module's CR is deleted); a module the Kyma lists and the
    catalog makes mandatory comes twice. :func:`render` (what is created) and :func:`ahead` (the
    kinds discovered early) both choose from it, so they cannot drift apart."""
    catalog = ctx.catalog()
    found = [
        (catalog[entry["name"]], entry) for entry in ctx.kyma.module_entries() if entry["name"] in catalog
    ]
    found += [(module, _mandatory_entry(module)) for module in catalog.values() if module.mandatory]
    return found


def _mandatory_entry(module: Module) -> dict[str, Any]:
    """The Kyma entry a mandatory module is reconciled by (no Kyma lists it: its CR is created)."""
    return {"name": module.name, "customResourcePolicy": "CreateAndDelete"}


def ahead(ctx: ReconcileContext) -> None:
    """The discovery of each module CR kind the step touches (:func:`_touched`) that the runtime's
    client does not know yet (a new runtime's first reconcile, or the first since the worker
    started), made with an earlier step's wave instead of a round trip of its own
    (:func:`.apply.read_ahead`)."""
    client = ctx.client
    kinds = {(module.cr_api_version, module.cr_kind) for module, _ in _touched(ctx) if module.cr_kind}
    for api_version, kind in sorted(kinds):
        if not client.knows(api_version, kind):
            read_ahead(ctx, STEP, functools.partial(client.resource, api_version, kind))


def step(ctx: ReconcileContext) -> None:
    """The modules (:func:`sync`); their managers are notified once the reconcile is done."""
    ctx.changed_configs = sync(ctx)


def render(ctx: ReconcileContext) -> list[dict[str, Any]]:
    """The module CRs the control plane creates (policy CreateAndDelete): of the Kyma's modules
    and the catalog's mandatory ones (:func:`_touched`), those not leaving the catalog."""
    created: dict[str, Module] = {}
    for module, entry in _touched(ctx):
        if (
            entry.get("managed", True)
            and entry.get("customResourcePolicy", "CreateAndDelete") == "CreateAndDelete"
            and not module.is_deleting
        ):
            created.setdefault(module.name, module)
    return [module_resource(module, ctx.kyma.runtime_id) for module in created.values()]


def _mandatory(
    ctx: ReconcileContext, module: Module, config: ModuleConfig | None, changed: list[int]
) -> ModuleOutcome:
    """A mandatory module: no channel (the highest version its channels offer, as this runtime
    gets them), its CR created and kept as for any module, and no entry in the Kyma's status."""
    offered = [v for c in sorted(module.channels) if (v := ctx.targets.module_version(module, c))]
    version = highest(offered) or ""
    refused = downgrade(ctx, module, "", version, config)
    if refused is not None:
        version = refused.installed
    outcome = _one(ctx, module, _mandatory_entry(module), "", version, config, changed)
    outcome.policy = "CreateAndDelete"
    if refused is not None:
        outcome.state, outcome.message = KymaState.WARNING, refused.message
    return outcome


@dataclass(frozen=True)
class Downgrade:
    """A version lower than the one the runtime runs, refused: the module keeps ``installed``."""

    installed: str
    channel: str  # the channel it was installed from (upstream's status keeps it)
    message: str


def downgrade(
    ctx: ReconcileContext, module: Module, channel: str, version: str, config: ModuleConfig | None
) -> Downgrade | None:
    """Upstream's rule: a module is never downgraded in a runtime (a downgraded operator can meet
    CRDs stored at a newer version). A channel switch or a catalog change that would give this
    runtime a lower version than it runs is refused; the module keeps its version and turns
    Warning with upstream's message. An explicit rollback of a rollout is not a downgrade: the
    operator asked for the old version back."""
    installed = installed_version(ctx, module, config)
    if not installed or not version or version_key(version) >= version_key(installed):
        return None
    if channel and ctx.targets.rolled_back(module, channel):
        return None
    entry = next((m for m in ctx.kyma.module_status or () if m.get("name") == module.name), None)
    previous = str((entry or {}).get("channel") or channel)
    message = (
        f"module template update not allowed: ignore channel skew (from {previous} to "
        f"{channel or previous}), as a higher version ({installed}) of the module was previously installed"
    )
    return Downgrade(installed, previous, message)


def installed_version(ctx: ReconcileContext, module: Module, config: ModuleConfig | None) -> str:
    """The version the runtime runs now: what its manager was last given (a config from before
    versions were handed out: what the Kyma's status said), ``""`` when the module is new here."""
    if config is None:
        return ""
    if config.version:
        return config.version
    entry = next((m for m in ctx.kyma.module_status or () if m.get("name") == module.name), None)
    return str((entry or {}).get("version") or "")


@dataclass(frozen=True)
class Hold:
    """Why a new version is held back: ``waits`` for a window that will open (the module status
    says ``maintenance: true``), else no window can come (no policy, or none for this runtime)."""

    message: str
    waits: bool


def _maintenance(
    ctx: ReconcileContext, module: Module, version: str, config: ModuleConfig | None
) -> tuple[str, Hold | None]:
    """Upstream's rule: a version that requires downtime reaches a runtime that runs the module
    already only inside its maintenance window, unless the Kyma skips windows; a first
    installation is never held back. Returns the version to hand out, and why it is held (then
    the installed one stays), or ``None``. When no window can come (no policy, or none for this
    runtime) nothing will ever let the version through: upstream reports that as the module's
    Error, without ``maintenance`` (which means a wait that ends), and so do we; a rollout judges
    it a failure, not a wait."""
    installed = installed_version(ctx, module, config)
    if (
        not installed
        or installed == version
        or ctx.kyma.skip_maintenance_windows
        or not module.requires_downtime(version)
    ):
        return version, None
    window = ctx.window()
    if window.is_open:
        return version, None
    if window.upcoming is None:
        cannot = f"cannot update {module.name} from {installed} to {version}: {window.problem}"
        return installed, Hold(cannot, waits=False)
    begin = window.upcoming.begin
    ctx.recheck(begin + dt.timedelta(seconds=1))  # reconciled again as the window opens
    waiting = (
        f"waiting for the next maintenance window to update {module.name} from {installed} to {version} "
        f"(it requires downtime; the window opens {display(begin)})"
    )
    return installed, Hold(waiting, waits=True)


def _one(
    ctx: ReconcileContext,
    module: Module,
    entry: dict,
    channel: str,
    version: str,
    config: ModuleConfig | None,
    changed: list[int],
) -> ModuleOutcome:
    doc = module_resource(module, ctx.kyma.runtime_id)
    key, digest = "|".join(key_of(doc)), document_hash(doc)
    reported = ((config.status if config else {}) or {}).get("state")
    named = key_of(doc) in ctx.named  # an event of this reconcile said it changed
    if (
        ctx.events_trusted
        and reported
        and not named
        and config.version == version
        and verified_recently(ctx, key, digest)
    ):
        state, message = _state_of(config, {})
        return ModuleOutcome(
            module.name,
            state,
            channel,
            version,
            message,
            _tracking(doc),
            generation=config.source_generation,
        )
    creates = entry.get("customResourcePolicy") == "CreateAndDelete"
    try:
        # Never seen in this runtime (a first reconcile): created without a read first; the API
        # server's 409 says when it is there already (a user's or an earlier control plane's).
        live = None if creates and key not in ctx.verified else _read(ctx, doc)
        if live is None and creates:
            try:
                live = ctx.client.create(doc)
                ctx.change("applied", resource=resource_name(doc), action=f"created (module {module.name})")
            except Exists:
                live = _read(ctx, doc, fresh=True)
    except Gone as exc:
        ctx.verified.pop(key, None)
        return ModuleOutcome(
            module.name,
            KymaState.PROCESSING,
            channel,
            version,
            f"waiting for the module's resource type: {exc.message}",
            _tracking(doc),
        )
    if live is None:
        ctx.verified.pop(key, None)
        return ModuleOutcome(
            module.name,
            KymaState.PROCESSING,
            channel,
            version,
            "waiting for the module's custom resource (policy Ignore)",
            _tracking(doc),
        )
    live_meta = live.get("metadata") or {}
    source = (live.get("spec") or {}, live_meta.get("generation", 0), live_meta.get("resourceVersion", ""))
    if config is None or (
        config.spec,
        config.source_generation,
        config.source_resource_version,
        config.version,
    ) != (*source, version):
        # (only this reconcile writes a config's spec, under the Kyma's lease: no need to look again)
        config, was_changed = module_services.moduleconfig_upsert(
            kyma=ctx.kyma,
            module=module,
            spec=source[0],
            source_generation=source[1],
            source_resource_version=source[2],
            version=version,
        )
        if was_changed and module.notifies:
            changed.append(config.pk)
    note_seen(ctx, key, digest)
    state, message = _state_of(config, live)
    return ModuleOutcome(
        module.name,
        state,
        channel,
        version,
        message,
        _tracking(doc),
        generation=live_meta.get("generation", 0),
    )


def _read(ctx: ReconcileContext, doc: dict[str, Any], *, fresh: bool = False) -> dict[str, Any] | None:
    """The module CR in the runtime: as this reconcile read it already, unless ``fresh``."""
    meta = doc["metadata"]
    if fresh:
        return ctx.client.get(doc["apiVersion"], doc["kind"], meta["name"], meta["namespace"])
    return read(ctx, doc["apiVersion"], doc["kind"], meta["name"], meta["namespace"])


def owned_resources(ctx: ReconcileContext) -> dict[str, dict[str, Any]]:
    """The module CRs to delete when their module (or the Kyma) goes, after this reconcile (a
    deletion: those still there, :func:`remove`)."""
    if ctx.owned_left is not None:
        return ctx.owned_left
    return {m.name: m.resource for m in [*ctx.modules, *ctx.mandatory] if m.owns_resource}


def _delete(ctx: ReconcileContext, resource: dict[str, Any]) -> dict[str, Any] | None:
    """Delete a module CR; the CR when it is still there (its operator's finalizer holds it while
    the operator cleans up: the module's objects stay in place meanwhile)."""
    pending = ctx.client.delete_pending(
        resource["apiVersion"], resource["kind"], resource["name"], resource.get("namespace")
    )
    if pending is not None:
        return pending
    ctx.verified.pop("|".join(identity(resource)), None)
    ctx.change("removed", resource=_where(resource), action="deleted")
    return None


def identity(resource: dict[str, Any]) -> tuple[str, str, str, str]:
    """``(apiVersion, kind, namespace, name)`` of a tracked module CR."""
    return resource["apiVersion"], resource["kind"], resource.get("namespace") or "", resource["name"]


def _where(resource: dict[str, Any]) -> str:
    where = "/".join(part for part in (resource.get("namespace"), resource["name"]) if part)
    return f"{resource['kind']} {where}"


def _remove_dropped(ctx: ReconcileContext, enabled: set[str], configs: dict[int, ModuleConfig]) -> None:
    """Modules no longer in the spec (or no longer mandatory, or leaving the catalog): delete the
    CRs the control plane created; a CR a finalizer still holds keeps its module Deleting (and
    its config, so its manager keeps its objects in place) until it is gone. Their configs then go;
    a mandatory module that left the catalog goes from it once no runtime holds it."""
    waiting = set()
    for name, resource in ctx.kyma.owned_module_resources.items():
        if name in enabled:
            continue
        pending = _delete(ctx, resource)
        if pending is not None:
            waiting.add(name)
            finalizers = ", ".join((pending.get("metadata") or {}).get("finalizers") or ())
            outcome = ModuleOutcome(
                name,
                KymaState.DELETING,
                message=f"waiting for {_where(resource)} to go (finalizers: {finalizers})",
                resource=resource,
                policy="CreateAndDelete",
            )
            module = ctx.catalog().get(name)
            (ctx.mandatory if module is not None and module.mandatory else ctx.modules).append(outcome)
    dropped = [c for c in configs.values() if c.module.name not in enabled and c.module.name not in waiting]
    if dropped:
        ModuleConfig.objects.filter(pk__in=[c.pk for c in dropped]).delete()
        for config in dropped:
            if config.module.is_deleting:  # a mandatory module leaving the catalog: its objects go too
                for resource in SyncResource.objects.filter(kyma=ctx.kyma, module=config.module):
                    deletion_begin(resource)  # (pruned by this reconcile's SyncResources step)
                module_services.module_deletion_finish(module=config.module)


def remove(ctx: ReconcileContext) -> list[tuple[str, str, str, str]]:
    """On Kyma deletion, first: delete the module CRs the control plane created; returns those a
    finalizer still holds (their operators clean up meanwhile: the deletion waits for them)."""
    left = {}
    for name, resource in ctx.kyma.owned_module_resources.items():
        if _delete(ctx, resource) is not None:
            left[name] = resource
    ctx.owned_left = left
    return [identity(resource) for resource in left.values()]
