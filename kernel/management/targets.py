"""``NAMESPACE/NAME`` (or ``NAME``) of one object, as ``describe`` and ``delete`` take it."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError

from kernel.documents.registry import ResourceKind, for_name
from kernel.errors import ApplicationError


def kind_named(name: str) -> ResourceKind:
    try:
        return for_name(name)
    except ApplicationError as exc:
        raise CommandError(exc.message) from exc


def object_named(kind: ResourceKind, target: str) -> Any:
    """The one object ``target`` names; namespaced kinds default to the kind's namespace."""
    if "/" in target:
        if not kind.namespaced:
            raise CommandError(f"{kind.plural} are not namespaced: give just the name")
        namespace, name = target.split("/", 1)
    else:
        namespace, name = (kind.default_namespace if kind.namespaced else None), target
    if not name or (kind.namespaced and not namespace):
        raise CommandError(f"give the object as NAMESPACE/NAME, not {target!r}")
    found = kind.select(namespace, name).first()
    if found is None:
        where = f"{namespace}/{name}" if kind.namespaced else name
        raise CommandError(f'{kind.plural} "{where}" not found')
    return found
