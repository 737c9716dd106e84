"""Watch streams: newline-delimited JSON events, as ``kubernetes.watch.Watch`` consumes them.

Without ``resourceVersion`` (or with ``0``) the stream starts with an ``ADDED`` event per current
object; with a resourceVersion from a list it resumes from there (coalesced, see ``store``) or
answers a 410 ``Expired`` error event when that version is no longer known. With a label or field
selector a watch sees the selection, as a real server's does: an object changed out of it is
``DELETED`` (its last version in the selection, at the change's resourceVersion), one changed into
it ``ADDED``. ``timeoutSeconds`` ends the stream. No ``BOOKMARK`` events are sent (a real server
sends them now and then, when asked; see the package's known gaps).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping
from typing import Any

from aiohttp import web

from runtime_emulator import errors, selectors
from runtime_emulator.catalog import ResourceType
from runtime_emulator.engine import Engine
from runtime_emulator.selectors import Requirement
from runtime_emulator.store import Change, Event

DEFAULT_TIMEOUT = 1800.0


async def serve(
    raw: web.BaseRequest,
    engine: Engine,
    rtype: ResourceType,
    namespace: str | None,
    name: str,
    query: Mapping[str, str],
) -> web.StreamResponse:
    """Answer one watch request with a stream of events."""
    label_text = query.get("labelSelector", "")
    field_text = query.get("fieldSelector", "")
    engine.select(rtype, namespace, label_text, field_text)  # validates the selectors (400 before streaming)
    labels = selectors.parse_labels(label_text) if label_text else ()
    fields = selectors.parse_fields(field_text) if field_text else ()
    try:
        timeout = float(query.get("timeoutSeconds") or DEFAULT_TIMEOUT)
    except ValueError:
        raise errors.bad_request("timeoutSeconds must be a number") from None

    def placed(obj: dict[str, Any]) -> bool:  # all but the labels
        meta = obj["metadata"]
        return (
            (namespace is None or meta.get("namespace") == namespace)
            and (not name or meta["name"] == name)
            and selectors.fields_match(fields, obj)
        )

    def wanted(obj: dict[str, Any]) -> bool:
        return placed(obj) and selectors.labels_match(labels, obj["metadata"].get("labels"))

    store = engine.store
    store.start_log()
    queue = store.subscribe(rtype.storage)
    try:
        since = query.get("resourceVersion") or "0"
        if since == "0":
            backlog: list[tuple[str, dict[str, Any]]] | None = [
                ("ADDED", o) for o in engine.select(rtype, namespace) if wanted(o)
            ]
        else:
            try:
                changes = store.changes_since(rtype.storage, int(since))
            except ValueError:
                raise errors.bad_request(f"invalid resource version: {since}") from None
            backlog = None
            if changes is not None:
                backlog = [e for c in changes if (e := _resumed(c, wanted, placed, labels))]
        response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(raw)
        if backlog is None:
            gone = errors.status_body(
                errors.expired(f"too old resource version: {since} ({store.resource_version})")
            )
            await response.write(json.dumps({"type": "ERROR", "object": gone}).encode() + b"\n")
            return response
        for event, obj in backlog:
            await response.write(_line(event, engine.render(rtype, obj)))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while (remaining := deadline - loop.time()) > 0:
            try:
                change = await asyncio.wait_for(queue.get(), remaining)
            except TimeoutError:
                break
            seen = _seen(change, wanted)
            if seen is not None:
                await response.write(_line(seen[0], engine.render(rtype, seen[1])))
        await response.write_eof()
        return response
    finally:
        store.unsubscribe(rtype.storage, queue)


Wanted = Callable[[dict[str, Any]], bool]


def _seen(change: Event, wanted: Wanted) -> tuple[str, dict[str, Any]] | None:
    """What a watch of a selection sees of one change (``None``: nothing)."""
    event, obj, old = change
    now = wanted(obj)
    if event != "MODIFIED" or old is None:
        return (event, obj) if now else None
    before = wanted(old)
    if before and not now:  # left the selection: its last version in it, at this change's version
        meta = {**old["metadata"], "resourceVersion": obj["metadata"]["resourceVersion"]}
        return "DELETED", {**old, "metadata": meta}
    if now:
        return ("MODIFIED" if before else "ADDED"), obj
    return None


def _resumed(
    change: Change, wanted: Wanted, placed: Wanted, labels: tuple[Requirement, ...]
) -> tuple[str, dict[str, Any]] | None:
    """What a resumed watch sees of an object's coalesced changes (``None``: nothing)."""
    before = change.existed and placed(change.obj) and selectors.labels_match(labels, change.labels_before)
    if change.removed:
        return ("DELETED", change.obj) if before else None
    now = wanted(change.obj)
    if before and not now:
        return "DELETED", change.obj
    if now:
        return ("MODIFIED" if before else "ADDED"), change.obj
    return None


def _line(event: str, obj: dict[str, Any]) -> bytes:
    return json.dumps({"type": event, "object": obj}).encode() + b"\n"
