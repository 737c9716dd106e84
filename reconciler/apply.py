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

import functools
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from fleet.k8s.client import ObjectKey, Permanent, RuntimeAPIError, RuntimeClient
from fleet.k8s.ownership import MANAGED_SELECTOR, field_manager
from fleet.k8s.parallel import all_at_once
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
    """Read the runtime's copies of ``docs`` (at once where that is worth it:
    :mod:`fleet.k8s.parallel`): the objects of one kind and namespace with one labelled list when
    there are several (all carry our managed-by label), a lone one with a GET; :func:`live_object`
    then answers from what was read. Objects never seen in place are left out (:func:`never_seen`),
    unless the caller ``known`` them to have been applied (a SyncResource's manifests: its own
    record says so). A read the runtime refuses is left to the object's own read, which reports it
    where its caller handles it."""
    groups: dict[tuple[str, str, str], list[ObjectKey]] = defaultdict(list)
    for doc in docs:
        key = key_of(doc)
        if key not in ctx.listed and (known or not never_seen(ctx, doc)):
            groups[key[:3]].append(key)
    client = ctx.client
    reads = [functools.partial(_read_group, client, keys) for keys in groups.values()]
    for found in all_at_once(reads, idle=client.idle_connections):
        ctx.listed.update(found)


def _read_group(client: RuntimeClient, keys: list[ObjectKey]) -> dict[ObjectKey, dict[str, Any] | None]:
    api_version, kind, namespace, name = keys[0]
    try:
        if len(keys) == 1:
            return {keys[0]: client.get(api_version, kind, name, namespace or None)}
        items = client.list(api_version, kind, namespace or None, labels=MANAGED_SELECTOR)
    except Permanent:
        return {}  # e.g. the kind is not served: each object's own read says so
    found = {(item.get("metadata") or {}).get("name"): item for item in items}
    return {key: found.get(key[3]) for key in keys}


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
    key = key_of(doc)
    if key in ctx.ahead.applied:
        return False  # applied moments ago, with an earlier step's wave (:func:`apply_ahead`)
    return ctx.full or not verified_recently(ctx, "|".join(key), digest_of(doc))


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
    return apply_all(ctx, [doc], every_time=every_time, adopt_from=adopt_from)[0]


# What a refused apply of one object of a wave becomes (a retry of its own), or it raises.
Recover = Callable[[dict[str, Any], Permanent], "dict[str, Any] | None"]


def apply_all(
    ctx: ReconcileContext,
    docs: Sequence[dict[str, Any]],
    *,
    every_time: bool | Callable[[dict[str, Any]], bool] = True,
    adopt_from: Collection[str] = (),
    recover: Recover | None = None,
) -> list[dict[str, Any] | None]:
    """:func:`apply_if_changed` for each of ``docs``, objects that may be written in any order (a
    wave): each is compared with what was read of it (:func:`prefetch` reads them at once), then
    the applies due go at once (:mod:`fleet.k8s.parallel`), then each is noted, in order. An apply
    the runtime refuses is handed to ``recover`` when given; the first error is raised once every
    other object of the wave is noted. ``every_time``: for all of them, or which (see
    :func:`apply_if_changed`)."""
    each = every_time if callable(every_time) else lambda _doc: every_time
    results: list[dict[str, Any] | None] = []
    due: list[tuple[int, _Due]] = []
    for index, doc in enumerate(docs):
        ctx.step()
        compared = _compare(ctx, doc, every_time=each(doc), adopt_from=adopt_from)
        if isinstance(compared, _Due):
            due.append((index, compared))
        results.append(None if isinstance(compared, _Due) else compared)
    client = ctx.client
    applies = [functools.partial(_apply_answer, client, docs[index]) for index, _ in due]
    early, reads = _ride_along(ctx, len(applies))
    calls = [
        *applies,
        *(functools.partial(_apply_answer, client, doc) for doc in early),
        *(read for _, read in reads),
    ]
    answers = all_at_once(calls, idle=client.idle_connections)
    # (in the order of ``calls``: the wave's own applies, the early ones, then the reads)
    early_answers = answers[len(applies) : len(applies) + len(early)]
    for doc, answer in zip(early, early_answers, strict=True):
        if not isinstance(answer, RuntimeAPIError):  # (else its own step applies it, and says why)
            _applied(ctx, doc, answer, _Due(unread=True, drift=False), every_time=False, adopt_from=())
            ctx.ahead.applied.add(key_of(doc))
    for (key, _), answer in zip(reads, answers[len(applies) + len(early) :], strict=True):
        if key is not None and not isinstance(answer, RuntimeAPIError):  # (else its step reads it)
            ctx.listed[key] = answer  # (:func:`live_object` answers from it)
    answers = answers[: len(applies)]
    failed: Exception | None = None
    for (index, how), answer in zip(due, answers, strict=True):
        doc = docs[index]
        try:
            if isinstance(answer, Permanent) and recover is not None:
                results[index] = recover(doc, answer)
            elif isinstance(answer, RuntimeAPIError):
                raise answer
            else:
                _applied(ctx, doc, answer, how, every_time=each(doc), adopt_from=adopt_from)
        except RuntimeAPIError as exc:
            failed = failed or exc
    if failed is not None:
        raise failed
    return results


def apply_ahead(
    ctx: ReconcileContext, step: str, docs: Iterable[dict[str, Any]], *, after: Iterable[dict[str, Any]] = ()
) -> None:
    """Let ``docs`` of a later ``step`` ride along with an earlier wave (``ctx.ahead``): only objects
    that depend on nothing the steps before make (a CRD) and were never seen in this runtime
    (nothing to compare: applied as they are), each with a wave after the one that applied the
    objects ``after`` (say, their CRDs). Their step then finds them applied; what no wave took,
    or the runtime refused, the step applies itself."""
    first = frozenset(key_of(doc) for doc in after)
    ctx.ahead.docs.extend(
        (step, doc, first) for doc in docs if never_seen(ctx, doc) and key_of(doc) not in ctx.listed
    )


def read_ahead(ctx: ReconcileContext, step: str, read: Callable[[], object]) -> None:
    """Let a read of a later ``step`` ride along with an earlier wave (``ctx.ahead``). ``read``
    keeps its result itself (a kind's discovery: in the client's cache); it runs on another
    thread, must not touch the database, and its errors are dropped (the step's own call, if
    made, reports them)."""
    ctx.ahead.reads.append((step, None, functools.partial(_read_answer, read)))


def read_again_ahead(ctx: ReconcileContext, step: str, doc: dict[str, Any]) -> None:
    """Let a read of ``doc``'s object (just applied by ``step``: what was read of it before is
    out of date, and forgotten) ride along with a later wave (:func:`read_ahead`). Its answer is
    kept on ``ctx.listed``, as :func:`prefetch` keeps what it reads, so :func:`live_object`
    answers from it, or reads the object itself when no wave took the read or it failed."""
    key = key_of(doc)
    ctx.listed.pop(key, None)
    api_version, kind, namespace, name = key
    read = functools.partial(ctx.client.get, api_version, kind, name, namespace or None)
    ctx.ahead.reads.append((step, key, functools.partial(_read_answer, read)))


def _read_answer(read: Callable[[], object]) -> object:
    """The read's answer, or why it failed (returned, not raised: the wave goes on)."""
    try:
        return read()
    except RuntimeAPIError as exc:
        return exc


def _ride_along(
    ctx: ReconcileContext, applies: int
) -> tuple[list[dict[str, Any]], list[tuple[ObjectKey | None, Callable[[], object]]]]:
    """What of ``ctx.ahead`` a wave of ``applies`` writes takes along: only a wave that writes, and
    only as many as idle connections can carry with the wave's own (no new connection: its
    handshake would cost the round trips the ride saves)."""
    if not applies or not ctx.ahead:
        return [], []
    room = min(settings.RUNTIME_PARALLEL_CALLS, ctx.client.idle_connections()) - applies
    return ctx.ahead.take(room) if room > 0 else ([], [])


@dataclass(frozen=True)
class _Due:
    """An object of a wave that must be applied: never read (``unread``), or drifted."""

    unread: bool
    drift: bool


def _compare(
    ctx: ReconcileContext, doc: dict[str, Any], *, every_time: bool, adopt_from: Collection[str]
) -> dict[str, Any] | _Due:
    """What the runtime holds of ``doc`` when nothing needs to be written (see
    :func:`apply_if_changed`), else how it is due (a drift found is recorded on the context)."""
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
    return _Due(unread=unread, drift=drift)


def _apply_answer(
    client: RuntimeClient, doc: dict[str, Any]
) -> tuple[dict[str, Any], bool] | RuntimeAPIError:
    """The apply's answer and whether it created the object, or why it failed (returned, not
    raised: the wave's other objects are noted first)."""
    try:
        return client.apply_created(doc)
    except RuntimeAPIError as exc:
        return exc


def _applied(
    ctx: ReconcileContext,
    doc: dict[str, Any],
    answer: tuple[dict[str, Any], bool],
    how: _Due,
    *,
    every_time: bool,
    adopt_from: Collection[str],
) -> None:
    """Note an object the runtime just took: seen in place, and the change for the timeline."""
    applied, created = answer
    _verified(ctx, doc, every_time=every_time)
    if adopt_from and take_over(ctx, doc, applied, adopt_from):
        ctx.change("applied", resource=resource_name(doc), action="taken over from " + ", ".join(adopt_from))
    elif not how.drift:
        action = "created" if created else "adopted (it was there already)" if how.unread else "updated"
        ctx.change("applied", resource=resource_name(doc), action=action)


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
