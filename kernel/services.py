"""Helpers every resource service shares: validation, generation bumps, deletion."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from django.core.exceptions import ValidationError as DjangoValidationError
from django.utils import timezone

from kernel import audit
from kernel.errors import ValidationFailed
from kernel.models import ResourceModel

M = TypeVar("M", bound=ResourceModel)


def upsert(
    model: type[M], key: dict[str, Any], fields: dict[str, Any], save: Callable[[M], object]
) -> tuple[M, bool]:
    """Create the object named by its natural ``key``, or make the stored one (locked until the
    caller's transaction ends) match ``fields``; then store it through the app's ``save`` service
    (validation, generation, reconciles). Returns (object, created). The lock is PostgreSQL's
    FOR NO KEY UPDATE (an edit changes no key): rows beside the object that reference it (a
    Kyma's lease, mark and heartbeat rows) are still written meanwhile, never waiting on it."""
    obj = model.objects.select_for_update(no_key=True).filter(**key).first()
    created = obj is None
    obj = obj or model(**key)
    for field, value in {**key, **fields}.items():  # the key's objects too: no query to get them again
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


def _stored_row(obj: ResourceModel) -> dict[str, Any] | None:
    """The stored row's values by attribute name (``None``: no stored row)."""
    fields = [f.attname for f in obj._meta.concrete_fields if f.attname not in _UNVERSIONED]
    return type(obj).objects.filter(pk=obj.pk).values(*fields).first()


def _stored_changes(obj: ResourceModel, stored: dict[str, Any] | None) -> set[str] | None:
    """Names of the fields whose value differs from the stored row (``None``: no stored row)."""
    if stored is None:
        return None
    fields = {f.attname: f.name for f in obj._meta.concrete_fields if f.attname not in _UNVERSIONED}
    return {name for attname, name in fields.items() if stored[attname] != getattr(obj, attname)}


def _unchanged(obj: ResourceModel, differs: set[str] | None) -> list[str]:
    """Fields validation may skip: unchanged, and in no unique set with a changed field."""
    if differs is None:
        return []
    together = [tuple(names) for names in obj._meta.unique_together]
    together += [tuple(c.fields) for c in obj._meta.total_unique_constraints]
    checked = set(differs)
    for names in together:
        if checked.intersection(names):
            checked.update(names)
    return [f.name for f in obj._meta.concrete_fields if f.name not in checked]


def resource_save(obj: M, *, before: dict | None, vouched: Iterable[str] = ()) -> bool:
    """Validate and save ``obj``; bump ``generation`` when its spec differs from ``before``, and
    ``resource_version`` when anything stored changes (so a write that changes nothing keeps it).

    An update validates the fields it changes (and the model's own ``clean``): an unchanged
    reference or unique key was checked when it was stored, and checking it again cost a query
    each (four of a SyncResource update's 23; bench/module_chain.py's web role). ``vouched``
    names fields the caller answers for, skipped too, with every unique key they are part of:
    references to rows it holds locked, keys only the database can enforce race-free anyway
    (a violation is then an IntegrityError instead of a validation message).

    Returns whether the spec changed (always true for a new object).
    """
    changed = before is None or before != obj.spec_snapshot()
    if before is not None and changed:
        obj.generation += 1
    stored = _stored_row(obj) if before is not None and obj.pk is not None else None
    differs = _stored_changes(obj, stored) if before is not None and obj.pk is not None else None
    if before is not None and (differs is None or differs):
        obj.resource_version += 1
    try:
        obj.full_clean(exclude=[*_unchanged(obj, differs), *vouched])
    except DjangoValidationError as exc:
        raise ValidationFailed.from_django(exc) from exc
    obj.save()
    audit.record_change(obj, before=stored)  # a door's write (who, from where, what changed)
    return changed


def deletion_begin(obj: ResourceModel) -> bool:
    """First step of a two-step delete. Returns True when the object is gone already.

    Without finalizers the row is deleted at once; otherwise it is marked with a deletion
    timestamp and stays until the cleanup that owns the finalizer removes it.
    """
    if not obj.finalizers:
        audit.record_object(obj, action="delete")
        obj.delete()
        return True
    if obj.deletion_timestamp is None:
        audit.record_object(obj, action="delete")
        obj.deletion_timestamp = timezone.now()
        obj.save(update_fields=["deletion_timestamp", "updated_at"])
    return False
