"""Content hashes of the objects we apply into runtimes.

Each object carries ``HASH_ANNOTATION``: a digest of the object as we send it (the annotation
itself left out). A reconcile re-applies an object only when the runtime's copy carries another
digest (or none), so a no-op reconcile reads and writes nothing it need not.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

HASH_ANNOTATION = "controlplane.kyma-project.io/content-hash"


def document_hash(doc: dict[str, Any]) -> str:
    """A stable digest of an object as we would send it (our own hash annotation excluded). Only
    the path to that annotation is copied (a deep copy of the object took most of the time of a
    hash: bench/fleet.py's profile)."""
    body = doc
    metadata = doc.get("metadata")
    if isinstance(metadata, dict) and HASH_ANNOTATION in (metadata.get("annotations") or {}):
        annotations = {k: v for k, v in metadata["annotations"].items() if k != HASH_ANNOTATION}
        body = {**doc, "metadata": {**metadata, "annotations": annotations}}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:20]


def stamped(doc: dict[str, Any]) -> dict[str, Any]:
    """The object with its content hash annotation set (in place; returned for chaining)."""
    doc.setdefault("metadata", {}).setdefault("annotations", {})[HASH_ANNOTATION] = document_hash(doc)
    return doc


def carries_hash(live: dict[str, Any] | None, doc: dict[str, Any]) -> bool:
    """Whether the runtime's copy carries the digest of ``doc`` (a stamped object)."""
    if live is None:
        return False
    live_hash = ((live.get("metadata") or {}).get("annotations") or {}).get(HASH_ANNOTATION)
    return live_hash == doc["metadata"]["annotations"][HASH_ANNOTATION]
