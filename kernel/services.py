"""Helpers every resource service shares: validation, generation bumps, deletion."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from django.core.exceptions import ValidationError as DjangoValidationError
from django.utils import timezone

from kernel.errors import ValidationFailed
from kernel.models import ResourceModel

M = TypeVar("M", bound=ResourceModel)


def upsert(
    model: type[M], key: dict[str, Any], fields: dict[str, Any], save: Callable[[M], object]
) -> tuple[M, bool]:
    """Create the object named by its natural ``key``, or make the stored one (locked until the
    caller's transaction ends) match ``fields``; then store it through the app's ``save`` service
    (validation, generation, reconciles). Returns (object, created)."""
    obj = model.objects.select_for_update().filter(**key).first()
    created = obj is None
    obj = obj or model(**key)
    for field, value in fields.items():
        setattr(obj, field, value)
    save(obj)
    return obj, created


def stored_spec(obj: ResourceModel) -> dict | None:
    """The spec as it is in the database (``None`` for a new object)."""
    if obj.pk is None:
        return None
    previous = type(obj).objects.filter(pk=obj.pk).only(*obj.SPEC_FIELDS).first()
    return previous.spec_snapshot() if previous is not None else None


# Columns that do not make a new version of the object.
_UNVERSIONED = frozenset({"id", "resource_version", "updated_at", "created_at"})


def _stored_differs(obj: ResourceModel) -> bool:
    names = [f.attname for f in obj._meta.concrete_fields if f.attname not in _UNVERSIONED]
    stored = type(obj).objects.filter(pk=obj.pk).values(*names).first()
    return stored is None or any(stored[name] != getattr(obj, name) for name in names)


def resource_save(obj: M, *, before: dict | None) -> bool:
    """Validate and save ``obj``; bump ``generation`` when its spec differs from ``before``, and
    ``resource_version`` when anything stored changes (so a write that changes nothing keeps it).

    Returns whether the spec changed (always true for a new object).
    """
    changed = before is None or before != obj.spec_snapshot()
    if before is not None and changed:
        obj.generation += 1
    if before is not None and _stored_differs(obj):
        obj.resource_version += 1
    try:
        obj.full_clean()
    except DjangoValidationError as exc:
        raise ValidationFailed.from_django(exc) from exc
    obj.save()
    return changed


def deletion_begin(obj: ResourceModel) -> bool:
    """First step of a two-step delete. Returns True when the object is gone already.

    Without finalizers the row is deleted at once; otherwise it is marked with a deletion
    timestamp and stays until the cleanup that owns the finalizer removes it.
    """
    if not obj.finalizers:
        obj.delete()
        return True
    if obj.deletion_timestamp is None:
        obj.deletion_timestamp = timezone.now()
        obj.save(update_fields=["deletion_timestamp", "updated_at"])
    return False
