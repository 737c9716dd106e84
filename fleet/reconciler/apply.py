"""Apply an object into the runtime only when its content changed (one GET, and an apply if so)."""

from __future__ import annotations

from typing import Any

from kernel.documents.hashing import carries_hash

from .context import ReconcileContext


def live_object(ctx: ReconcileContext, doc: dict[str, Any]) -> dict[str, Any] | None:
    meta = doc["metadata"]
    return ctx.client.get(doc["apiVersion"], doc["kind"], meta["name"], meta.get("namespace"))


def apply_if_changed(ctx: ReconcileContext, doc: dict[str, Any]) -> dict[str, Any] | None:
    """The runtime's object when it already carried ``doc``'s content hash; ``None`` when it was
    (re)applied with server-side apply."""
    live = live_object(ctx, doc)
    if carries_hash(live, doc):
        return live
    ctx.client.apply(doc)
    ctx.change("applied", resource=resource_name(doc), action="created" if live is None else "updated")
    return None


def resource_name(doc: dict[str, Any]) -> str:
    """``Deployment kyma-system/skr-webhook`` (kind, then namespace/name or the name alone)."""
    meta = doc.get("metadata") or {}
    where = "/".join(part for part in (meta.get("namespace"), meta.get("name")) if part)
    return f"{doc.get('kind')} {where}"
