"""A change a runtime's API server is about to store, and how to tell that it has.

A validating webhook is called *before* the API server stores the change, so a reconcile that
covers a WatchEvent must not trust what it reads before the change is stored. Our runtime
watcher says which change it saw (the operation, the object's uid and the resourceVersion the
change starts from); the reconcile then reads the object until the change shows instead of
waiting a fixed delay.

When is a change stored? The old object in an admission request is the stored object at that
moment, and a stored resourceVersion never comes back, so:

* UPDATE or DELETE: stored once the object's resourceVersion differs from the old one, or the
  object is gone (or was re-created: another uid). If a *different* write won the race, ours
  fails its precondition and the API server retries it, calling the webhooks again: a new event.
* CREATE: stored once the object exists (with the uid the webhook saw, when it saw one).

A change that is never stored (another webhook rejected it) never shows: the wait ends at its
bound (``RECONCILE_STORED_WAIT``).

Changes travel with the queue mark as short strings (:meth:`StoredChange.encode`): the mark of a
queued reconcile carries the union of the changes of the events it covers.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

OPERATIONS = ("CREATE", "UPDATE", "DELETE")
# More distinct changes than this on one queued reconcile: the rest fall back to the fixed delay
# (a reconcile checks each of them with a read; a hot object's events repeat the same few anyway).
MAX_CHANGES = 16


@dataclass(frozen=True)
class StoredChange:
    """One change of one object in a runtime: ``api_version``/``kind``/``namespace``/``name``
    name the object; ``operation``, ``uid`` and ``old_resource_version`` the change."""

    api_version: str
    kind: str
    namespace: str
    name: str
    operation: str
    uid: str = ""
    old_resource_version: str = ""

    def encode(self) -> str:
        """One line (JSON escapes every control character), stable for equal changes."""
        fields = [
            self.api_version,
            self.kind,
            self.namespace,
            self.name,
            self.operation,
            self.uid,
            self.old_resource_version,
        ]
        return json.dumps(fields, separators=(",", ":"))

    @classmethod
    def decode(cls, line: str) -> StoredChange | None:
        """The change a line holds, or ``None`` for anything else (never raises)."""
        try:
            fields = json.loads(line)
        except ValueError:
            return None
        if not isinstance(fields, list) or len(fields) != 7 or not all(isinstance(f, str) for f in fields):
            return None
        return cls(*fields)

    @property
    def key(self) -> tuple[str, str, str, str]:
        """The object's key as the reconcile knows objects: (apiVersion, kind, namespace, name)."""
        return self.api_version, self.kind, self.namespace or "", self.name

    def stored(self, live: dict[str, Any] | None) -> bool:
        """Whether the runtime's object as read now (``None``: absent) shows this change stored."""
        metadata = (live or {}).get("metadata") or {}
        if self.operation == "CREATE":
            return live is not None and (not self.uid or metadata.get("uid") == self.uid)
        if live is None:
            return True
        if self.uid and metadata.get("uid") != self.uid:
            return True
        return metadata.get("resourceVersion") != self.old_resource_version


def encode_all(changes: Iterable[StoredChange]) -> list[str]:
    return sorted({change.encode() for change in changes})


def decode_all(lines: Iterable[str]) -> tuple[StoredChange, ...]:
    found = (StoredChange.decode(line) for line in lines if line)
    return tuple(change for change in found if change is not None)
