"""The runtime's own Kyma (``kyma-system/default``): the object users edit inside their runtime.

The control plane creates it from its copy. Afterwards each side's changes flow to the other by
generation: a change the user made in the runtime (its generation moved since our last sync)
replaces the control plane's ``spec.modules``/``spec.channel``; a change made in the control plane
(its generation moved since our last push) is applied to the runtime. If both moved, the runtime
wins: that is where the user edited. Its status mirrors the control plane's view of the Kyma.

A periodic reconcile that may trust the runtime watcher's events (``ctx.events_trusted``) does
not read it when nothing is to be pushed and it was seen in place less than
``RUNTIME_RECHECK_INTERVAL`` ago: the watcher reports every change of it as an event, whose
reconcile reads it. What the status mirror last left in it is kept as a digest, so the status is
still written when (and only when) the control plane's view moved.
"""

from __future__ import annotations

import functools
import time
from typing import Any

from fleet.k8s.client import Exists, Gone
from fleet.k8s.ownership import MANAGED_BY
from fleet.models import Kyma, RuntimeSync
from fleet.models.bookkeeping import row_write
from fleet.models.kyma import MODULE_DEFAULTS
from fleet.models.records import describe_change
from fleet.services import kymas as kyma_services
from kernel.documents.hashing import document_hash, stamped
from kernel.errors import ValidationFailed

from .apply import apply_if_changed, note_seen, read, verified_recently
from .context import ReconcileContext
from .kyma_crd import CRD_NAME as CRD_NAME
from .kyma_crd import kyma_crd as _unstamped_crd

NAMESPACE = "kyma-system"
NAME = "default"
API_VERSION = "operator.kyma-project.io/v1beta2"
LABELS = {"operator.kyma-project.io/watched-by": "kyma", **MANAGED_BY}
# Entries of ``RuntimeSync.runtime_verified``: the runtime's Kyma seen with our labels (digest of them),
# and the status the mirror last found or wrote there (digest of it).
KEY = (API_VERSION, "Kyma", NAMESPACE, NAME)  # the runtime's Kyma as ctx.listed and ctx.named key it
VERIFIED_KEY = "|".join(KEY)
MIRRORED_KEY = f"{VERIFIED_KEY}|status"
CRD_SERVED_WAITS = (0.05, 0.1, 0.2, 0.4, 0.8, 1.6)  # seconds: about 3 in all


@functools.cache
def kyma_crd() -> dict[str, Any]:
    """The Kyma CRD the runtime needs to store its Kyma (the control plane installs it, as upstream),
    with our own schema, so the runtime's API server validates users' edits (``.kyma_crd``).
    Rendered and hashed once per process (it never changes); callers must not change it."""
    return stamped(_unstamped_crd())


def ensure_crd(ctx: ReconcileContext, *, every_time: bool = False) -> None:
    """Rechecked every ``RUNTIME_RECHECK_INTERVAL`` (the Kyma read right after fails if it went).
    The client learns the Kyma's plural and scope from the CRD: no discovery call for them."""
    crd = kyma_crd()
    ctx.client.learn(crd)
    apply_if_changed(ctx, crd, every_time=every_time)


def namespace() -> dict[str, Any]:
    """The namespace the control plane manages (created when missing, never changed after)."""
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": NAMESPACE, "labels": dict(MANAGED_BY)},
    }


def render(ctx: ReconcileContext) -> list[dict[str, Any]]:
    """What this step wants in the runtime: the Kyma CRD, the namespace, the runtime's Kyma."""
    return [kyma_crd(), namespace(), desired(ctx.kyma)]


def step(ctx: ReconcileContext) -> None:
    """The Kyma CRD, then the runtime's Kyma both ways (the first call of a reconcile: when it
    answers, the runtime is reachable). What it read is the status mirror's (:func:`mirror_status`)."""
    ensure_crd(ctx)
    ctx.runtime_kyma = sync(ctx)
    ctx.condition("Runtime", "True", "Reachable", "the runtime's API server answers")


def remove(ctx: ReconcileContext) -> list[tuple[str, str, str, str]]:
    """On Kyma deletion, last: the runtime's Kyma (its CRD stays: users may hold other Kymas)."""
    left = ctx.client.delete_pending(API_VERSION, "Kyma", NAME, NAMESPACE)
    return [KEY] if left is not None else []


def desired(kyma: Kyma) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "Kyma",
        "metadata": {
            "name": NAME,
            "namespace": NAMESPACE,
            "labels": {**LABELS, "kyma-project.io/runtime-id": kyma.runtime_id},
        },
        "spec": {"channel": kyma.channel, "modules": kyma.module_entries()},
    }


def _spec_of(live: dict[str, Any]) -> tuple[str, list]:
    spec = live.get("spec") or {}
    return spec.get("channel", "regular"), list(spec.get("modules") or [])


def _labels_digest(kyma: Kyma) -> str:
    return document_hash(desired(kyma)["metadata"]["labels"])


def known_unchanged(ctx: ReconcileContext) -> bool:
    """Whether this reconcile may leave the runtime's Kyma unread: it trusts the watcher's events
    (and none of its own named the Kyma), the control plane has nothing new to push, and the Kyma
    was seen with our labels recently."""
    kyma = ctx.kyma
    return (
        ctx.events_trusted
        and not ctx.full
        and KEY not in ctx.named
        and kyma.generation == ctx.sync.pushed_generation
        and verified_recently(ctx, VERIFIED_KEY, _labels_digest(kyma))
    )


def sync(ctx: ReconcileContext) -> dict[str, Any] | None:
    """Create or reconcile the runtime's Kyma; returns it as it is now in the runtime (``None``:
    not read, :func:`known_unchanged`)."""
    if known_unchanged(ctx):
        return None
    live = _sync(ctx)
    note_seen(ctx, VERIFIED_KEY, _labels_digest(ctx.kyma))
    return live


# How often the runtime's Kyma is read again when a user changed it between this reconcile's read
# and its push of the control plane's spec (each time, the user's change is adopted first).
PUSH_ATTEMPTS = 3


def _sync(ctx: ReconcileContext, attempts: int = PUSH_ATTEMPTS) -> dict[str, Any]:
    kyma, client = ctx.kyma, ctx.client
    live = read(ctx, API_VERSION, "Kyma", NAME, NAMESPACE)
    if live is None:
        # (the Kyma lives there: no need to look at the namespace while it exists)
        client.ensure_namespace(NAMESPACE, namespace()["metadata"]["labels"])
        try:
            live = _apply_when_served(ctx, desired(kyma))
        except Gone:  # the CRD went since it was last verified: install it, then the Kyma
            ensure_crd(ctx, every_time=True)
            live = _apply_when_served(ctx, desired(kyma))
        ctx.change("applied", resource=f"Kyma {NAMESPACE}/{NAME}", action="created")
        _record(ctx, live, pushed=kyma.generation)
        return live
    try:
        return _both_ways(ctx, live)
    except Exists:
        if attempts <= 1:
            raise
        # A user changed the runtime's Kyma since this reconcile read it: written blindly, the
        # control plane's spec (or the spec as read) would overwrite that change, and it would
        # never be adopted. Read it again: the change is adopted, as it would have been had it
        # come a moment earlier.
        ctx.listed.pop(KEY, None)
        return _sync(ctx, attempts - 1)


def _both_ways(ctx: ReconcileContext, live: dict[str, Any]) -> dict[str, Any]:
    """The runtime's Kyma as read (``live``): a user's change is adopted, else the control plane's
    new spec is pushed; our labels are put back. Every write is made only if the Kyma is still as
    read (:class:`Exists` otherwise)."""
    kyma, client = ctx.kyma, ctx.client
    live_generation = live.get("metadata", {}).get("generation", 0)
    if live_generation != ctx.sync.runtime_kyma_generation:
        channel, modules = _spec_of(live)
        normalized = [{**MODULE_DEFAULTS, **m} if isinstance(m, dict) else m for m in modules]
        if (channel, normalized) != (kyma.channel, kyma.module_entries()):
            _adopt(ctx, channel, modules)
        _record(ctx, live, pushed=kyma.generation)
    elif kyma.generation != ctx.sync.pushed_generation:
        live = client.apply(_unless_changed_since(desired(kyma), live))
        ctx.change(
            "applied", resource=f"Kyma {NAMESPACE}/{NAME}", action="updated with the control plane's spec"
        )
        _record(ctx, live, pushed=kyma.generation)
    labels = live.get("metadata", {}).get("labels") or {}
    if any(labels.get(key) != value for key, value in desired(kyma)["metadata"]["labels"].items()):
        live = client.apply(_unless_changed_since({**desired(kyma), "spec": live.get("spec", {})}, live))
        _record(ctx, live, pushed=kyma.generation)
    return live


def _unless_changed_since(doc: dict[str, Any], live: dict[str, Any]) -> dict[str, Any]:
    """``doc`` applied only if the object is still as ``live`` read it (its resourceVersion: the
    API server answers 409 Conflict otherwise, even to a forced apply)."""
    version = live.get("metadata", {}).get("resourceVersion")
    if not version:
        return doc
    return {**doc, "metadata": {**doc["metadata"], "resourceVersion": version}}


def _apply_when_served(ctx: ReconcileContext, doc: dict[str, Any]) -> dict[str, Any]:
    """Apply the runtime's Kyma; a CRD created a moment ago is served only once the API server
    established it (a real one answers 404 until then, within about a second): a few retries at
    growing intervals, then the 404 (:class:`Gone`) stands."""
    for wait in CRD_SERVED_WAITS:
        try:
            return ctx.client.apply(doc)
        except Gone:
            ctx.step()  # keeps the lease
            time.sleep(wait)
    return ctx.client.apply(doc)


def _adopt(ctx: ReconcileContext, channel: str, modules: list) -> None:
    """The user changed the runtime's Kyma: the control plane's copy follows, if it is valid.

    Only a spec that breaks the rules is "rejected"; anything else (the database gone, a bug)
    fails the reconcile, which the task retries, instead of being blamed on the user's spec.
    """
    kyma = ctx.kyma
    differences = spec_changes(kyma.channel, kyma.module_entries(), channel, modules)
    kyma.channel, kyma.modules = channel, modules
    try:
        kyma_services.kyma_save(kyma=kyma, reconcile=False)  # this reconcile goes on with the new spec
    except ValidationFailed as exc:
        kyma.refresh_from_db()
        ctx.condition(
            "Modules", "False", "InvalidRuntimeSpec", f"the runtime's Kyma spec was rejected: {exc}"
        )
        ctx.messages.append(f"runtime Kyma spec rejected: {exc}")
    else:
        for kind, details in differences:
            ctx.change(kind, source="made in the runtime", **details)
        summary = "; ".join(describe_change({"kind": kind, **details}) for kind, details in differences)
        ctx.messages.append(f"adopted spec changes made in the runtime: {summary or 'defaults only'}")


def spec_changes(
    old_channel: str, old_modules: list, new_channel: str, new_modules: list
) -> list[tuple[str, dict[str, Any]]]:
    """Field by field: ``("spec", {field: channel, before: regular, after: fast})``, modules added
    or removed, and a module's own fields (``modules[keda].channel``) before → after."""
    found: list[tuple[str, dict[str, Any]]] = []
    if old_channel != new_channel:
        found.append(("spec", {"field": "channel", "before": old_channel, "after": new_channel}))
    old = {m["name"]: {**MODULE_DEFAULTS, **m} for m in old_modules if isinstance(m, dict) and "name" in m}
    new = {m["name"]: {**MODULE_DEFAULTS, **m} for m in new_modules if isinstance(m, dict) and "name" in m}
    for name in new.keys() - old.keys():
        found.append(("module-added", {"module": name}))
    for name in old.keys() - new.keys():
        found.append(("module-removed", {"module": name}))
    for name in sorted(old.keys() & new.keys()):
        for key in sorted(old[name].keys() | new[name].keys()):
            if old[name].get(key) != new[name].get(key):
                found.append(
                    (
                        "spec",
                        {
                            "field": f"modules[{name}].{key}",
                            "before": old[name].get(key),
                            "after": new[name].get(key),
                        },
                    )
                )
    return sorted(found, key=lambda item: (item[0] != "spec" or "[" in item[1].get("field", ""), str(item)))


def _record(ctx: ReconcileContext, live: dict[str, Any], *, pushed: int) -> None:
    """The generations just synced, written at once (the reconcile may still fail after this)."""
    sync = ctx.sync
    sync.runtime_kyma_generation = live.get("metadata", {}).get("generation", 0)
    sync.pushed_generation = pushed
    row_write(
        RuntimeSync,
        ctx.kyma.pk,
        runtime_kyma_generation=sync.runtime_kyma_generation,
        pushed_generation=sync.pushed_generation,
    )


def mirror_status(ctx: ReconcileContext, live: dict[str, Any] | None, status: dict[str, Any]) -> None:
    """Show the control plane's view in the runtime's Kyma status (written only on change). When
    the Kyma was not read (``live`` is ``None``), the digest of what the mirror last found or
    wrote there stands for its status."""
    digest = document_hash(status)
    if live is not None:
        current = live.get("status") or {}
        stale = any(current.get(key) != value for key, value in status.items())
    else:
        stale = (ctx.verified.get(MIRRORED_KEY) or [None])[0] != digest
    if stale:
        ctx.client.patch_status(API_VERSION, "Kyma", NAME, NAMESPACE, status)
    if (ctx.verified.get(MIRRORED_KEY) or [None])[0] != digest:
        ctx.verified[MIRRORED_KEY] = [digest, int(ctx.now.timestamp())]
