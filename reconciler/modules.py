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
from dataclasses import dataclass
from typing import Any

from fleet.k8s.client import Exists, Gone
from fleet.models import KymaState, Module, ModuleConfig
from fleet.services import modules as module_services
from kernel.documents.hashing import document_hash
from kernel.timefmt import display

from .apply import key_of, read, resource_name, verified_recently
from .context import FALSE, TRUE, ModuleOutcome, ReconcileContext

MANAGED_BY = {"operator.kyma-project.io/managed-by": "kyma"}


def module_resource(module: Module, kyma_runtime_id: str) -> dict[str, Any]:
    """The module's default CR as the control plane creates it in one runtime: with its labels."""
    doc = module.default_cr_object()
    doc["metadata"]["labels"] = {
        **doc["metadata"].get("labels", {}),
        **MANAGED_BY,
        "operator.kyma-project.io/module-name": module.name,
        "kyma-project.io/runtime-id": kyma_runtime_id,
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
    """Reconcile every module of the Kyma; returns ids of ModuleConfigs that changed whose
    manager gets notifications (:attr:`Module.notifies`; the others watch or poll)."""
    kyma = ctx.kyma
    entries = kyma.module_entries()
    catalog = ctx.catalog()
    configs = {c.module_id: c for c in ModuleConfig.objects.filter(kyma=kyma).select_related("module")}
    changed: list[int] = []
    missing = []
    for entry in entries:
        name = entry["name"]
        module = catalog.get(name)
        channel = entry.get("channel") or kyma.channel
        if module is None:
            missing.append(name)
            ctx.modules.append(
                ModuleOutcome(name, KymaState.ERROR, channel, message="not in the module catalog")
            )
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
        version, held = _maintenance(ctx, module, version, config)
        outcome = _one(ctx, module, entry, channel, version, config, changed)
        outcome.policy = entry.get("customResourcePolicy", "CreateAndDelete")
        if held is not None:
            outcome.message = held.message
            if held.waits:
                outcome.maintenance = True
            else:
                outcome.state = KymaState.ERROR
        ctx.modules.append(outcome)
    if missing:
        ctx.condition(
            "ModuleCatalog", FALSE, "ModuleNotInCatalog", "unknown in the catalog: " + ", ".join(missing)
        )
    else:
        ctx.condition("ModuleCatalog", TRUE, "Ready", "every module is in the catalog")
    _remove_dropped(ctx, {e["name"] for e in entries}, configs)
    bad = [m.name for m in ctx.modules if m.state != KymaState.READY]
    if bad:
        ctx.condition("Modules", FALSE, "ModulesNotReady", "not ready: " + ", ".join(sorted(bad)))
    else:
        ctx.condition("Modules", TRUE, "Ready", "all modules are ready")
    return changed


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
    ctx.verified[key] = [digest, int(ctx.now.timestamp())]
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
    """The module CRs to delete when their module (or the Kyma) goes, after this reconcile."""
    return {m.name: m.resource for m in ctx.modules if m.owns_resource}


def _delete(ctx: ReconcileContext, resource: dict[str, Any]) -> None:
    ctx.client.delete(resource["apiVersion"], resource["kind"], resource["name"], resource.get("namespace"))
    identity = (resource["apiVersion"], resource["kind"], resource.get("namespace") or "", resource["name"])
    ctx.verified.pop("|".join(identity), None)
    where = "/".join(part for part in (resource.get("namespace"), resource["name"]) if part)
    ctx.change("removed", resource=f"{resource['kind']} {where}", action="deleted")


def _remove_dropped(ctx: ReconcileContext, enabled: set[str], configs: dict[int, ModuleConfig]) -> None:
    """Modules no longer in the spec: delete the CRs the control plane created, drop their configs."""
    for name, resource in ctx.kyma.owned_module_resources.items():
        if name not in enabled:
            _delete(ctx, resource)
    dropped = [c.pk for c in configs.values() if c.module.name not in enabled]
    if dropped:
        ModuleConfig.objects.filter(pk__in=dropped).delete()


def remove_all(ctx: ReconcileContext) -> None:
    """On Kyma deletion: delete the module CRs the control plane created."""
    for resource in ctx.kyma.owned_module_resources.values():
        _delete(ctx, resource)
