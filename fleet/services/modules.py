"""Writes of the module catalog, module configs and sync resources."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from django.db import transaction

from fleet import queue
from fleet.models import Kyma, Module, ModuleConfig, RolloutKind, SyncResource
from fleet.models.rollout import effective_policy
from fleet.rollouts.services import ByHand, Change, rollout_start, subject_rollouts_end
from fleet.selectors import kyma_ids_using_module, module_users
from kernel import audit
from kernel.errors import Conflict
from kernel.services import deletion_begin, resource_save, stored_spec, upsert

from .revisions import moduleconfig_revision_stamp


def module_save(*, module: Module, by_hand: ByHand | None = None) -> bool:
    """Validate and store a catalog entry; Kymas that enable it are reconciled on change.

    A new version in a channel that more than one runtime uses goes out in a rollout
    (:func:`version_change`, the policy's waves): those runtimes are left to its waves, unless
    something else of the module changed too (their reconcile then renders that, and still their
    own version). ``by_hand``: the new version goes out in a rollout made by hand instead (its
    waves and gate, even to one runtime: ``fleet.rollouts.subjects``)."""
    with transaction.atomic():
        before = stored_spec(module)
        changed = resource_save(module, before=before)
        if changed:
            held = _versions_roll_out(module, before["channels"], by_hand) if before is not None else set()
            others_changed = before is not None and any(
                before[name] != getattr(module, name) for name in Module.SPEC_FIELDS if name != "channels"
            )
            users = kyma_ids_using_module(module.name)
            if not others_changed:
                users = [kyma_id for kyma_id in users if kyma_id not in held]
            queue.request(users, reason=f"module {module.name} changed", urgent=True)
    return changed


def version_change(module: Module, channel: str, old: str | None, version: str) -> Change:
    """``module``'s version in ``channel`` going from ``old`` to ``version``, for the Kymas that
    use it there (each with ``old`` as its target until its wave)."""
    return Change(
        kind=RolloutKind.MODULE_VERSION,
        subject=f"{module.name}/{channel}",
        change={
            "kind": RolloutKind.MODULE_VERSION,
            "module": module.name,
            "channel": channel,
            "version": version,
        },
        from_value=old,
        to_value=version,
        members=[replace(m, from_value=old) for m in module_users(module.name, channel)],
        policy=effective_policy(RolloutKind.MODULE_VERSION, module.rollout_policy),
    )


def _versions_roll_out(module: Module, before: dict[str, str], by_hand: ByHand | None) -> set[int]:
    """Start a rollout for each channel whose version changed (inside ``module_save``'s
    transaction); returns the Kymas left to those rollouts (their waves queue their reconciles)."""
    held: set[int] = set()
    for channel, version in sorted(module.channels.items()):
        old = before.get(channel)
        if (old is None and by_hand is None) or old == version:
            continue
        change = version_change(module, channel, old, version)
        if by_hand is None:
            rollout = rollout_start(change=change, name=f"{module.name}-{channel}-{version}")
        else:
            rollout = rollout_start(
                change=change,
                name=by_hand.name,
                automatic=False,
                created_by=by_hand.user,
                waves=by_hand.waves,
                gate=by_hand.gate,
            )
        if rollout is not None:
            held.update(m.kyma_id for m in change.members)
    return held


@transaction.atomic
def module_apply(
    *, name: str, labels: dict | None = None, annotations: dict | None = None, **spec: Any
) -> tuple[Module, bool]:
    """Create or update the catalog entry ``name``; ``spec`` holds the model's spec fields."""
    fields = {**spec, "labels": labels or {}, "annotations": annotations or {}}
    return upsert(Module, {"name": name}, fields, lambda module: module_save(module=module))


def module_delete(*, module: Module) -> None:
    """Remove a catalog entry; Kymas that still enable it report it missing on their next reconcile."""
    with transaction.atomic():
        affected = kyma_ids_using_module(module.name)
        audit.record_object(module, action="delete")
        subject_rollouts_end("ModuleVersion", f"{module.name}/", f"module {module.name} was deleted")
        module.delete()
        queue.request(affected, reason=f"module {module.name} deleted", urgent=True)


def moduleconfig_upsert(
    *,
    kyma: Kyma,
    module: Module,
    spec: dict,
    source_generation: int,
    source_resource_version: str,
    version: str = "",
) -> tuple[ModuleConfig, bool]:
    """Record the module CR's spec found in the runtime and the version the manager should run
    there. The revision moves only on a real change. A new version clears the manager's report:
    it was about the old one (the module is Processing until the manager reports again)."""
    with transaction.atomic():
        config = ModuleConfig.objects.select_for_update().filter(kyma=kyma, module=module).first()
        if config is None:
            config = ModuleConfig(
                kyma=kyma, module=module, namespace=kyma.namespace, name=f"{kyma.name}-{module.name}"
            )
        elif config.spec == spec and config.version == version:
            if (config.source_generation, config.source_resource_version) != (
                source_generation,
                source_resource_version,
            ):
                config.source_generation, config.source_resource_version = (
                    source_generation,
                    source_resource_version,
                )
                config.save(update_fields=["source_generation", "source_resource_version", "updated_at"])
            return config, False
        before, created = stored_spec(config), config.pk is None
        if (
            not created and config.version and config.version != version
        ):  # (none: a config from before versions)
            config.status = {}
        config.spec = spec
        config.version = version
        config.source_generation = source_generation
        config.source_resource_version = source_resource_version
        # The Kyma and Module are rows the caller holds (the reconcile, under the Kyma's lease,
        # is the only writer of configs); the uid is new; the (kyma, module) key is the
        # database's to enforce. Checking them cost four queries per new config.
        resource_save(config, before=before, vouched=("kyma", "module", "uid"))
        moduleconfig_revision_stamp(config, created=created)  # last: see its docstring
    return config, True


def moduleconfig_delete(*, config: ModuleConfig) -> None:
    """Remove a Kyma's ModuleConfig by hand (the admin's delete): the next reconcile of its Kyma
    writes it again from the runtime's module CR if that is still there. Recorded in the trail."""
    with transaction.atomic():
        audit.record_object(config, action="delete")
        config.delete()


def moduleconfig_set_status(*, config: ModuleConfig, status: dict) -> bool:
    """The module manager reports on its module; the Kyma is reconciled to reflect it when what
    the Kyma shows of it (state, message) changed: a report that only moves ``observedRevision``
    (a manager acknowledging each new spec) is stored and streamed, and reconciles nothing."""
    with transaction.atomic():
        config = ModuleConfig.objects.select_for_update().get(pk=config.pk)
        if config.status == status:
            return False
        shown = {key: (config.status or {}).get(key) for key in REFLECTED_STATUS}
        config.status = status
        resource_save(config, before=config.spec_snapshot())
        if shown != {key: status.get(key) for key in REFLECTED_STATUS}:
            queue.request([config.kyma_id], reason="module status reported", urgent=True, full=False)
        moduleconfig_revision_stamp(config)  # last: see its docstring
    return True


# What a Kyma's reconcile takes from a ModuleConfig's status (``reconciler.modules``).
REFLECTED_STATUS = ("state", "message")


def syncresource_save(resource: SyncResource) -> bool:
    """Validate and store manifests for a runtime; its Kyma is reconciled on change."""
    if resource.is_deleting:
        raise Conflict(f"SyncResource {resource.key} is being deleted; it cannot be changed")
    with transaction.atomic(savepoint=False):  # see syncresource_apply
        resource.namespace = resource.kyma.namespace if resource.kyma_id else resource.namespace
        changed = resource_save(resource, before=stored_spec(resource))
        if changed:
            queue.request(
                [resource.kyma_id], reason=f"sync resource {resource.name} changed", urgent=True, full=False
            )
    return changed


@transaction.atomic(savepoint=False)
def syncresource_apply(
    *,
    kyma: Kyma,
    module: Module,
    name: str,
    manifests: str,
    apply_strategy: str = "ServerSideApply",
    deletion_policy: str = "Delete",
    labels: dict | None = None,
    annotations: dict | None = None,
) -> tuple[SyncResource, bool]:
    fields = {
        "manifests": manifests,
        "apply_strategy": apply_strategy,
        "deletion_policy": deletion_policy,
        "labels": labels or {},
        "annotations": annotations or {},
    }
    # Its own transaction, or part of the caller's without savepoints (two round trips each, on
    # the manager's hot path): an error rolls back to the caller's nearest savepoint, if any.
    key = {"kyma": kyma, "module": module, "name": name}
    resource, created = upsert(SyncResource, key, {"namespace": kyma.namespace, **fields}, syncresource_save)
    return resource, created


def syncresource_delete(*, resource: SyncResource) -> bool:
    """Begin deleting; objects it applied are pruned from the runtime first (unless Orphan)."""
    with transaction.atomic():
        kyma_id = resource.kyma_id
        gone = deletion_begin(resource)
        queue.request([kyma_id], reason=f"sync resource {resource.name} deleted", urgent=True, full=False)
    return gone
