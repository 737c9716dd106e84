"""Watch streams: newline-delimited JSON events, as ``kubernetes.watch.Watch`` consumes them.

Without ``resourceVersion`` (or with ``0``) the stream starts with an ``ADDED`` event per current
object; with a resourceVersion from a list it resumes from there (coalesced, see ``store``) or
answers a 410 ``Expired`` error event when that version is no longer known. A label/field
selector filters events by the object's current labels/fields. ``timeoutSeconds`` ends the stream.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from runtime_emulator import errors, selectors
from runtime_emulator.catalog import ResourceType
from runtime_emulator.engine import Engine

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

    def wanted(obj: dict[str, Any]) -> bool:
        meta = obj["metadata"]
        return (
            (namespace is None or meta.get("namespace") == namespace)
            and (not name or meta["name"] == name)
            and selectors.labels_match(labels, meta.get("labels"))
            and selectors.fields_match(fields, obj)
        )

    store = engine.store
    store.start_log()
    queue = store.subscribe(rtype.storage)
    try:
        since = query.get("resourceVersion") or "0"
        if since == "0":
            backlog: list[tuple[str, dict[str, Any]]] | None = [
                ("ADDED", o) for o in engine.select(rtype, namespace)
            ]
        else:
            try:
                backlog = store.changes_since(rtype.storage, int(since))
            except ValueError:
                raise errors.bad_request(f"invalid resource version: {since}") from None
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
            if wanted(obj):
                await response.write(_line(event, engine.render(rtype, obj)))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while (remaining := deadline - loop.time()) > 0:
            try:
                event, obj = await asyncio.wait_for(queue.get(), remaining)
            except TimeoutError:
                break
            if wanted(obj):
                await response.write(_line(event, engine.render(rtype, obj)))
        await response.write_eof()
        return response
    finally:
        store.unsubscribe(rtype.storage, queue)


def _line(event: str, obj: dict[str, Any]) -> bytes:
    return json.dumps({"type": event, "object": obj}).encode() + b"\n"
