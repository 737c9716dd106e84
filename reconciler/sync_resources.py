"""SyncResources: manifests module managers want in a runtime, applied by strategy.

ServerSideApply applies a manifest when the runtime's object is missing, carries another content
hash, or differs in a field the manifest sets (drift, corrected and recorded: see :mod:`.drift`);
manifests of one kind and namespace are read with one labelled list. A manifest whose content
changed since its last successful apply is applied without a read (the answer says whether it
was created: then it had been deleted in the runtime, which is drift). A targeted reconcile
(:mod:`.engine`) applies only the SyncResources that changed or are not all Applied.
CreateOnly creates a missing object and never touches an existing one; ReadOnly only observes.
Manifests that left a SyncResource are pruned from the runtime unless the deletion policy is
Orphan (read-only objects are never deleted). Each manifest's outcome is recorded; the
SyncResource row is written only when that record changed.
"""

from __future__ import annotations

import copy
from typing import Any

from fleet.k8s.client import RuntimeAPIError, Temporary
from fleet.models import ApplyStrategy, DeletionPolicy, ManifestState, SyncResource
from kernel.documents.hashing import HASH_ANNOTATION, carries_hash, stamped
from kernel.timefmt import rfc3339

from .apply import live_object, prefetch, resource_name
from .context import FALSE, TRUE, ModuleOutcome, ReconcileContext
from .drift import describe, drifted

OWNER_ANNOTATION = "controlplane.kyma-project.io/sync-resource"
FINALIZER = "controlplane.kyma-project.io/sync-resource"
# Cluster-wide and namespace objects first, so what lives in them can be created.
ORDER = {"CustomResourceDefinition": 0, "Namespace": 1}


def identity(entry: dict[str, Any]) -> tuple[str, str, str, str]:
    return entry["apiVersion"], entry["kind"], entry.get("namespace") or "", entry["name"]


def _key(doc: dict[str, Any]) -> tuple[str, str, str, str]:
    """:func:`identity` of a manifest."""
    return identity({"apiVersion": doc["apiVersion"], "kind": doc["kind"], **doc["metadata"]})


def prepared(doc: dict[str, Any], resource: SyncResource) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    meta = doc.setdefault("metadata", {})
    meta.setdefault("labels", {})["operator.kyma-project.io/managed-by"] = "kyma"
    annotations = meta.setdefault("annotations", {})
    annotations[OWNER_ANNOTATION] = f"{resource.namespace}/{resource.name}"
    return stamped(doc)


def _entry(doc: dict[str, Any], state: str, message: str, applied_at: str | None) -> dict[str, Any]:
    meta = doc["metadata"]
    entry = {
        "apiVersion": doc["apiVersion"],
        "kind": doc["kind"],
        "name": meta["name"],
        "namespace": meta.get("namespace", ""),
        "state": state,
        "hash": meta["annotations"][HASH_ANNOTATION],
    }
    if message:
        entry["message"] = message
    if applied_at:
        entry["lastAppliedTime"] = applied_at
    return entry


def replaced(resource: SyncResource, doc: dict[str, Any], old: dict | None) -> bool:
    """Whether ``doc`` is applied without reading the runtime's object first: server-side apply,
    and its last apply succeeded with another content (the object carries another hash, or is
    gone: either way it is applied, and the answer says whether it was created)."""
    return (
        resource.apply_strategy == ApplyStrategy.SERVER_SIDE_APPLY
        and (old or {}).get("state") == ManifestState.APPLIED
        and (old or {}).get("hash") != doc["metadata"]["annotations"][HASH_ANNOTATION]
    )


def _replace(ctx: ReconcileContext, resource: SyncResource, doc: dict[str, Any]) -> dict:
    _, created = ctx.client.apply_created(doc)
    if created:  # it was applied before: deleted in the runtime since
        ctx.drift.append(describe(doc))
    else:
        ctx.change("applied", resource=resource_name(doc), action=f"updated (SyncResource {resource.name})")
    return _entry(doc, ManifestState.APPLIED, "", rfc3339(ctx.now))


def _sync_one(ctx: ReconcileContext, resource: SyncResource, doc: dict[str, Any], old: dict | None) -> dict:
    client = ctx.client
    previous_time = (old or {}).get("lastAppliedTime")
    now = rfc3339(ctx.now)
    try:
        if replaced(resource, doc, old):
            return _replace(ctx, resource, doc)
        live = live_object(ctx, doc)
        if resource.apply_strategy == ApplyStrategy.READ_ONLY:
            if live is None:
                return _entry(
                    doc, ManifestState.FAILED, "not found in the runtime (read only)", previous_time
                )
            return _entry(doc, ManifestState.APPLIED, "observed", previous_time)
        if live is not None and resource.apply_strategy == ApplyStrategy.CREATE_ONLY:
            return _entry(doc, ManifestState.APPLIED, "", previous_time or now)
        drift_before = len(ctx.drift)
        if carries_hash(live, doc):
            if not drifted(doc, live):
                return _entry(doc, ManifestState.APPLIED, "", previous_time or now)
            ctx.drift.append(describe(doc))
        elif live is None and (old or {}).get("state") == ManifestState.APPLIED:
            ctx.drift.append(describe(doc))  # deleted in the runtime
        if resource.apply_strategy == ApplyStrategy.CREATE_ONLY:
            client.create(doc)
        else:
            client.apply(doc)
        if len(ctx.drift) == drift_before:  # (a correction is in the timeline as drift corrected)
            action = "created" if live is None else "updated"
            ctx.change(
                "applied", resource=resource_name(doc), action=f"{action} (SyncResource {resource.name})"
            )
    except Temporary:
        raise
    except RuntimeAPIError as exc:
        return _entry(doc, ManifestState.FAILED, exc.message, previous_time)
    return _entry(doc, ManifestState.APPLIED, "", now)


def _prune(ctx: ReconcileContext, resource: SyncResource, entries: list[dict]) -> list[dict]:
    """Delete objects of ``entries``; returns the entries that could not be deleted."""
    left = []
    for entry in entries:
        if (
            resource.deletion_policy == DeletionPolicy.ORPHAN
            or resource.apply_strategy == ApplyStrategy.READ_ONLY
        ):
            continue
        try:
            ctx.client.delete(
                entry["apiVersion"], entry["kind"], entry["name"], entry.get("namespace") or None
            )
            where = "/".join(part for part in (entry.get("namespace"), entry["name"]) if part)
            ctx.change(
                "removed",
                resource=f"{entry['kind']} {where}",
                action=f"pruned (SyncResource {resource.name})",
            )
        except Temporary:
            raise
        except RuntimeAPIError as exc:
            left.append({**entry, "state": ManifestState.FAILED, "message": f"prune failed: {exc.message}"})
    return left


def settled(resource: SyncResource) -> bool:
    """Whether the SyncResource is in the runtime as it is now: this content applied, every
    manifest Applied (a targeted reconcile leaves it to beat's sweep, which looks for drift)."""
    return (
        not resource.is_deleting
        and FINALIZER in resource.finalizers
        and resource.observed_generation == resource.generation
        and all(entry.get("state") == ManifestState.APPLIED for entry in resource.manifest_status)
    )


def sync(ctx: ReconcileContext) -> None:
    failing: dict[str, list[str]] = {}
    for resource in SyncResource.objects.filter(kyma=ctx.kyma).select_related("module"):
        ctx.step()
        if resource.is_deleting:
            _finish_deletion(ctx, resource)
            continue
        if ctx.targeted and settled(resource):
            continue
        manifests = resource.parsed_manifests(stored=True)
        docs = sorted(manifests, key=lambda d: ORDER.get(d.get("kind"), 2))
        old = {identity(e): e for e in resource.manifest_status}
        if FINALIZER not in resource.finalizers:
            resource.finalizers = [*resource.finalizers, FINALIZER]
            SyncResource.objects.filter(pk=resource.pk).update(finalizers=resource.finalizers)
        status = _refused_by_policy(ctx, resource, manifests, old)
        if status is None:
            status = []
            ready_docs = [prepared(doc, resource) for doc in docs]
            if resource.apply_strategy == ApplyStrategy.SERVER_SIDE_APPLY:  # (others: maybe not ours)
                prefetch(ctx, [doc for doc in ready_docs if not replaced(resource, doc, old.get(_key(doc)))])
            for ready in ready_docs:
                ctx.step()
                status.append(_sync_one(ctx, resource, ready, old.pop(_key(ready), None)))
            status.extend(_prune(ctx, resource, list(old.values())))
        if status != resource.manifest_status or resource.observed_generation != resource.generation:
            SyncResource.objects.filter(pk=resource.pk).update(
                manifest_status=status, observed_generation=resource.generation
            )
        bad = [
            f"{e['kind']} {e['name']}: {e.get('message', '')}"
            for e in status
            if e["state"] == ManifestState.FAILED
        ]
        if bad:
            failing.setdefault(resource.module.name, []).extend(bad)
    if failing:
        problems = "; ".join(f"{module}: {', '.join(items)}" for module, items in sorted(failing.items()))
        ctx.condition("SyncResources", FALSE, "ApplyFailed", problems[:1000])
        _mark_modules(ctx, failing)
    else:
        ctx.condition("SyncResources", TRUE, "Ready", "every manifest is in the runtime")


def _mark_modules(ctx: ReconcileContext, failing: dict[str, list[str]]) -> None:
    by_name = {m.name: m for m in ctx.modules}
    for name, problems in failing.items():
        outcome = by_name.get(name)
        if outcome is None:
            outcome = ModuleOutcome(name, "Error")
            ctx.modules.append(outcome)
        outcome.state = "Error"
        outcome.message = f"manifests failed: {'; '.join(problems)}"[:500]


def _finish_deletion(ctx: ReconcileContext, resource: SyncResource) -> None:
    left = _prune(ctx, resource, list(resource.manifest_status))
    if left:
        SyncResource.objects.filter(pk=resource.pk).update(manifest_status=left)
        return
    resource.delete()


def _runtime_scope(ctx: ReconcileContext, group: str, version: str, kind: str) -> bool | None:
    """Whether the runtime serves ``kind`` namespaced (``None``: it does not serve it)."""
    try:
        return ctx.client.resource(f"{group}/{version}" if group else version, kind).namespaced
    except Temporary:
        raise
    except RuntimeAPIError:
        return None


def _refused_by_policy(
    ctx: ReconcileContext, resource: SyncResource, docs: list[dict[str, Any]], old: dict
) -> list[dict] | None:
    """The module's manifest policy on ``docs`` (in ``spec.manifests`` order), again just before
    apply: it may have been tightened since the write. ``None``: every manifest may be applied.
    Otherwise nothing of ``resource`` is applied or pruned: refused manifests are Failed with the
    reason, the others Pending, and objects of earlier manifests stay recorded for a later prune."""
    refusals = resource.module.manifest_policy.check(
        docs, fallback=lambda group, version, kind: _runtime_scope(ctx, group, version, kind)
    )
    if not refusals:
        return None
    reasons = {r.index: r.reason for r in refusals}
    first = refusals[0].path
    left = dict(old)
    status = []
    for index, doc in enumerate(docs):
        ready = prepared(doc, resource)
        previous = (left.pop(_key(ready), None) or {}).get("lastAppliedTime")
        if index in reasons:
            message = f"refused by the manifest policy: {reasons[index]}"
            status.append(_entry(ready, ManifestState.FAILED, message, previous))
        else:
            message = f"not applied: {first} of this SyncResource is refused by the manifest policy"
            status.append(_entry(ready, ManifestState.PENDING, message, previous))
    return status + list(left.values())


def remove_all(ctx: ReconcileContext) -> None:
    """On Kyma deletion: prune every SyncResource's objects, then drop the rows."""
    for resource in SyncResource.objects.filter(kyma=ctx.kyma):
        ctx.step()
        _finish_deletion(ctx, resource)
