"""Drift: an object in the runtime that no longer holds what we applied, though it still carries
our content-hash annotation (``kubectl edit``, ``kubectl scale --replicas 0``, a webhook removed).

The hash says whether *our* desired content changed since we applied it; only a comparison of the
fields we manage with the live object says whether someone changed them in the runtime. We manage
exactly the fields of the document we apply (server-side apply's rule), so the comparison walks the
desired document: every field in it must have the same value in the live object; fields the API
server or other managers added (defaults, ``status``, other labels) are not ours and never count.
Lists compare element by element and must have the same length (a removed webhook is drift). A
``false`` we set and the API server leaves out of its answer (Go's ``omitempty``) is no drift.
What differs is applied again with server-side apply, counted in
``controlplane_drift_corrected_total{kind}`` and recorded with the reconcile (the Kyma timeline).
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.db.models import F

from fleet.models import DriftCount

# Of the metadata, what we set besides the identity (name, namespace).
_OWN_METADATA = ("labels", "annotations")
# The identity, not content (items of a list even come without apiVersion and kind).
_IDENTITY = frozenset({"apiVersion", "kind", "metadata"})


def _differs(desired: Any, live: Any) -> bool:
    if desired is False and live is None:
        return False  # omitempty: a false field is left out (a PriorityClass's globalDefault)
    if isinstance(desired, dict):
        if not isinstance(live, dict):
            return True
        return any(_differs(value, live.get(key)) for key, value in desired.items())
    if isinstance(desired, list):
        if not isinstance(live, list) or len(live) != len(desired):
            return True
        return any(_differs(d, lv) for d, lv in zip(desired, live, strict=True))
    return desired != live


def drifted(desired: dict[str, Any], live: dict[str, Any]) -> bool:
    """Whether a field ``desired`` sets has another value (or is missing) in ``live``."""
    meta, live_meta = desired.get("metadata") or {}, live.get("metadata") or {}
    if any(_differs(meta.get(key) or {}, live_meta.get(key) or {}) for key in _OWN_METADATA):
        return True
    return any(_differs(value, live.get(key)) for key, value in desired.items() if key not in _IDENTITY)


# Comparisons that found an object in place, per process: (Kyma, cluster, object) -> (the live
# object's uid and resourceVersion, the desired content's hash, the managers it was checked
# against). The API server gives an object a new resourceVersion with every write to it (any
# field, by anyone), and a new uid when it is made again: the same uid and resourceVersion are
# the same object as compared then, so with the same desired content the answer is the same and
# the walk is skipped (bench/fleet.py: 4 % of a no-op reconcile's CPU). A few hundred bytes per
# runtime object read every reconcile; the table is dropped when it grows past _IN_PLACE_MAX.
_IN_PLACE: dict[tuple[Any, ...], tuple[str, str, str, tuple[str, ...]]] = {}
_IN_PLACE_MAX = 200_000


def _version_of(live: dict[str, Any]) -> tuple[str, str] | None:
    meta = live.get("metadata") or {}
    uid, version = meta.get("uid"), meta.get("resourceVersion")
    return (uid, version) if isinstance(uid, str) and uid and isinstance(version, str) and version else None


def in_place_as_compared(
    where: tuple[Any, ...], live: dict[str, Any], digest: str, managers: tuple[str, ...]
) -> bool:
    """Whether ``live`` is the very version of the object (uid, resourceVersion) that an earlier
    comparison with the same desired content (``digest``) and ``managers`` found in place
    (:func:`remember_in_place`); ``where``: the Kyma, its cluster and the object's key."""
    version = _version_of(live)
    return version is not None and _IN_PLACE.get(where) == (*version, digest, managers)


def remember_in_place(
    where: tuple[Any, ...], live: dict[str, Any], digest: str, managers: tuple[str, ...]
) -> None:
    """A comparison found ``live`` in place (see :func:`in_place_as_compared`)."""
    version = _version_of(live)
    if version is None:
        return
    if len(_IN_PLACE) >= _IN_PLACE_MAX:
        _IN_PLACE.clear()
    _IN_PLACE[where] = (*version, digest, managers)


def describe(doc: dict[str, Any]) -> dict[str, str]:
    """How a corrected object is recorded (kind, namespace, name)."""
    meta = doc["metadata"]
    return {"kind": doc["kind"], "namespace": meta.get("namespace", ""), "name": meta["name"]}


def count_corrections(kinds: list[str]) -> None:
    """Add corrections to the fleet-wide totals (a row per kind; scraped by any process)."""
    if not kinds:
        return
    with transaction.atomic():
        for kind in sorted(set(kinds)):
            n = kinds.count(kind)
            if not DriftCount.objects.filter(kind=kind).update(total=F("total") + n):
                _, created = DriftCount.objects.get_or_create(kind=kind, defaults={"total": n})
                if not created:
                    DriftCount.objects.filter(kind=kind).update(total=F("total") + n)
