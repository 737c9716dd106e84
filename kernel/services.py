"""Helpers every resource service shares: validation, generation bumps, deletion."""

from __future__ import annotations

from typing import TypeVar

from django.core.exceptions import ValidationError as DjangoValidationError
from django.utils import timezone

from kernel.errors import ValidationFailed
from kernel.models import ResourceModel

M = TypeVar("M", bound=ResourceModel)


def stored_spec(obj: ResourceModel) -> dict | None:
    """The spec as it is in the database (``None`` for a new object)."""
    if obj.pk is None:
        return None
    previous = type(obj).objects.filter(pk=obj.pk).only(*obj.SPEC_FIELDS).first()
    return previous.spec_snapshot() if previous is not None else None


def resource_save(obj: M, *, before: dict | None) -> bool:
    """Validate and save ``obj``; bump ``generation`` when its spec differs from ``before``.

    Returns whether the spec changed (always true for a new object).
    """
    changed = before is None or before != obj.spec_snapshot()
    if before is not None and changed:
        obj.generation += 1
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
