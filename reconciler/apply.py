"""Apply an object into the runtime only when it is missing, its desired content changed, or
someone changed what we manage in the runtime (drift); a reconcile that finds everything in place
writes nothing.

Round trips: objects whose drift matters at once (the watcher's Secret, Deployment and webhooks;
synced manifests) are read every reconcile; the rest (CRDs, the PriorityClass, NetworkPolicies,
Services) are known good for ``RUNTIME_RECHECK_INTERVAL`` once verified, and when due, the ones of
one kind and namespace are read in one labelled list instead of one GET each. When each was last
seen in place is kept on the Kyma (written with its status: no extra query), so every worker
process knows it, and the memory costs nothing per process. An object never seen in place (a new
runtime's first reconcile) is applied without a read: there is nothing to compare it with.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable
from typing import Any

from django.conf import settings

from fleet.k8s.client import ObjectKey, Permanent
from fleet.k8s.ownership import MANAGED_SELECTOR, field_manager
from kernel.documents.hashing import HASH_ANNOTATION, carries_hash

from .context import KUBECONFIG_KEY, ReconcileContext
from .drift import describe, drifted, in_place_as_compared, remember_in_place

TAKE_OVER_TRIES = 5


def key_of(doc: dict[str, Any]) -> ObjectKey:
    meta = doc["metadata"]
    return doc["apiVersion"], doc["kind"], meta.get("namespace") or "", meta["name"]


def digest_of(doc: dict[str, Any]) -> str:
    return doc["metadata"]["annotations"][HASH_ANNOTATION]


def live_object(ctx: ReconcileContext, doc: dict[str, Any]) -> dict[str, Any] | None:
    """The runtime's copy of ``doc`` (see :func:`read`)."""
    meta = doc["metadata"]
    return read(ctx, doc["apiVersion"], doc["kind"], meta["name"], meta.get("namespace"))


def read(
    ctx: ReconcileContext, api_version: str, kind: str, name: str, namespace: str | None = None
) -> dict[str, Any] | None:
    """The runtime's object as this reconcile knows it: from what it read already (``ctx.listed``:
    its labelled lists, and the objects its events named, read to check the change was stored)
    or with one GET."""
    key = (api_version, kind, namespace or "", name)
    if key in ctx.listed:
        return ctx.listed[key]
    return ctx.client.get(api_version, kind, name, namespace)


def prefetch(ctx: ReconcileContext, docs: Iterable[dict[str, Any]], *, known: bool = False) -> None:
    """Read objects of one kind and namespace with one labelled list when there are several (all
    carry our managed-by label); :func:`live_object` then answers from it. Objects never seen in
    place are left out (:func:`never_seen`), unless the caller ``known`` them to have been applied
    (a SyncResource's manifests: its own record says so)."""
    groups: dict[tuple[str, str, str], list[ObjectKey]] = defaultdict(list)
    for doc in docs:
        key = key_of(doc)
        if key not in ctx.listed and (known or not never_seen(ctx, doc)):
            groups[key[:3]].append(key)
    for (api_version, kind, namespace), keys in groups.items():
        if len(keys) < 2:
            continue
        try:
            items = ctx.client.list(api_version, kind, namespace or None, labels=MANAGED_SELECTOR)
        except Permanent:
            continue  # e.g. the kind is not served: each object's own GET says so
        found = {(item.get("metadata") or {}).get("name"): item for item in items}
        for key in keys:
            ctx.listed[key] = found.get(key[3])


def never_seen(ctx: ReconcileContext, doc: dict[str, Any]) -> bool:
    """Whether the control plane never saw ``doc``'s object in place in this runtime (nothing in
    ``RuntimeSync.runtime_verified``: a new runtime's first reconcile). There is nothing to compare then:
    the object is applied without reading it first (server-side apply changes nothing when it
    happens to be there already with this content), and no labelled list is made for it."""
    return "|".join(key_of(doc)) not in ctx.verified


def verified_recently(ctx: ReconcileContext, key: str, digest: str) -> bool:
    """Whether ``key`` was seen holding ``digest`` less than ``RUNTIME_RECHECK_INTERVAL`` ago
    (``RuntimeSync.runtime_verified``, shared by all workers)."""
    seen = ctx.verified.get(key)
    return bool(
        seen and seen[0] == digest and ctx.now.timestamp() - seen[1] < settings.RUNTIME_RECHECK_INTERVAL
    )


def needs_check(ctx: ReconcileContext, doc: dict[str, Any]) -> bool:
    """Whether a check that can wait is due: in a full reconcile (which reads every kind) always,
    else when the object was never seen holding this content, or longer than
    ``RUNTIME_RECHECK_INTERVAL`` ago."""
    return ctx.full or not verified_recently(ctx, "|".join(key_of(doc)), digest_of(doc))


# A check that found an object in place is noted again only once its note is this share of
# RUNTIME_RECHECK_INTERVAL old: the trust it gives lasts at least 3/4 of the interval, and a
# reconcile that reads it anyway (a full one) leaves RuntimeSync as it was (no write).
RENOTE_AFTER = 0.25


def note_seen(ctx: ReconcileContext, key: str, digest: str) -> None:
    """``key`` was seen holding ``digest`` now (``RuntimeSync.runtime_verified``)."""
    seen = ctx.verified.get(key)
    if (
        seen
        and seen[0] == digest
        and ctx.now.timestamp() - seen[1] < settings.RUNTIME_RECHECK_INTERVAL * RENOTE_AFTER
    ):
        return
    ctx.verified[key] = [digest, int(ctx.now.timestamp())]


def _verified(ctx: ReconcileContext, doc: dict[str, Any], *, every_time: bool = False) -> None:
    """Seen in place now. Objects checked every time are only noted once per content (so a
    deletion is known as drift), which keeps the RuntimeSync row unchanged between no-op
    reconciles."""
    key, digest = "|".join(key_of(doc)), digest_of(doc)
    if every_time and (ctx.verified.get(key) or [None])[0] == digest:
        return
    note_seen(ctx, key, digest)


def apply_if_changed(
    ctx: ReconcileContext,
    doc: dict[str, Any],
    *,
    every_time: bool = True,
    adopt_from: Collection[str] = (),
) -> dict[str, Any] | None:
    """Make the runtime hold ``doc`` (a stamped object). Returns the runtime's object when it was
    already in place (``doc`` itself when the check could wait and was skipped), ``None`` when it
    was (re)applied with server-side apply. A copy that carries our hash but differs in a field
    we manage, or that is gone though we had seen it in place, is drift: corrected and recorded
    on the context. Keeps the lease between objects (a slow runtime takes a while per call).
    Fields that managers in ``adopt_from`` own are taken over when it applies (:func:`take_over`)."""
    ctx.step()
    if not every_time and not needs_check(ctx, doc):
        return doc
    unread = key_of(doc) not in ctx.listed and never_seen(ctx, doc)  # nothing to compare with
    live = None if unread else live_object(ctx, doc)
    drift = False
    if carries_hash(live, doc):
        where, digest, managers = _compared_where(ctx, doc), digest_of(doc), tuple(adopt_from)
        if in_place_as_compared(where, live, digest, managers) or (
            not drifted(doc, live) and not (adopt_from and _held_by(live, adopt_from))
        ):
            remember_in_place(where, live, digest, managers)
            _verified(ctx, doc, every_time=every_time)
            return live
        # (in place but with fields another manager still holds: a take-over a busy controller
        # kept failing on an earlier reconcile is tried again)
        drift = drifted(doc, live)
    elif live is None and ctx.verified.get("|".join(key_of(doc))):
        drift = True  # deleted in the runtime
    if drift:
        ctx.drift.append(describe(doc))  # the timeline says "drift corrected: ..." for it
    applied, created = ctx.client.apply_created(doc)
    _verified(ctx, doc, every_time=every_time)
    if adopt_from and take_over(ctx, doc, applied, adopt_from):
        ctx.change("applied", resource=resource_name(doc), action="taken over from " + ", ".join(adopt_from))
    elif not drift:
        action = "created" if created else "adopted (it was there already)" if unread else "updated"
        ctx.change("applied", resource=resource_name(doc), action=action)
    return None


def _compared_where(ctx: ReconcileContext, doc: dict[str, Any]) -> tuple[Any, ...]:
    """Which object of which runtime a comparison was of (:func:`.drift.in_place_as_compared`)."""
    return (ctx.kyma.pk, ctx.verified.get(KUBECONFIG_KEY), *key_of(doc))


def take_over(
    ctx: ReconcileContext, doc: dict[str, Any], applied: dict[str, Any], managers: Collection[str]
) -> bool:
    """Make ``applied`` (our object as the apply answered it) wholly ours when other ``managers``
    own fields in it (a runtime another controller set up first): their fields move to our
    manager, then ``doc`` is applied again, which removes whatever only they had set (an env
    variable, a volume, a webhook we do not render), as server-side apply prunes fields its
    manager stops applying. Two writes, once; False when nothing was theirs. The move is guarded
    by the object's resourceVersion: when a controller wrote meanwhile (a Deployment's status),
    the object is read again and the move retried."""
    meta = applied.get("metadata") or {}
    for _ in range(TAKE_OVER_TRIES):
        entries = meta.get("managedFields") or []
        theirs = [e for e in entries if e.get("manager") in managers and not e.get("subresource")]
        ours = next((e for e in entries if _ours(e)), None)
        if not theirs or ours is None:
            return False
        fields = ours.get("fieldsV1") or {}
        for entry in theirs:
            fields = _union(fields, entry.get("fieldsV1") or {})
        kept = [e for e in entries if e is not ours and e not in theirs]
        try:
            ctx.client.replace_managed_fields(
                doc["apiVersion"],
                doc["kind"],
                meta["name"],
                meta.get("namespace"),
                [*kept, {**ours, "fieldsV1": fields}],
                resource_version=meta["resourceVersion"],
            )
        except Permanent as exc:
            if exc.status not in (409, 422):  # 422: the resourceVersion test failed
                raise
            fresh = ctx.client.get(doc["apiVersion"], doc["kind"], meta["name"], meta.get("namespace"))
            meta = (fresh or {}).get("metadata") or {}
            continue
        ctx.client.apply(doc)
        return True
    return False


def _held_by(live: dict[str, Any], managers: Collection[str]) -> bool:
    """Whether any of ``managers`` still owns fields of ``live`` (its main resource, not status)."""
    entries = (live.get("metadata") or {}).get("managedFields") or []
    return any(e.get("manager") in managers and not e.get("subresource") for e in entries)


def _ours(entry: dict[str, Any]) -> bool:
    return (
        entry.get("manager") == field_manager()
        and entry.get("operation") == "Apply"
        and not entry.get("subresource")
    )


def _union(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Two managed-fields sets (``fieldsV1`` trees) as one."""
    merged = dict(a)
    for key, value in b.items():
        merged[key] = _union(merged[key], value) if key in merged else value
    return merged


def resource_name(doc: dict[str, Any]) -> str:
    """``Deployment kyma-system/skr-webhook`` (kind, then namespace/name or the name alone)."""
    meta = doc.get("metadata") or {}
    where = "/".join(part for part in (meta.get("namespace"), meta.get("name")) if part)
    return f"{doc.get('kind')} {where}"
