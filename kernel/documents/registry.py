"""Kinds of Kubernetes-shaped documents, and applying many of them at once.

A :class:`ResourceKind` knows one ``apiVersion``/``kind``: its JSON Schema, how a document maps
onto the services that write the model, and how a model instance renders back as a document.
``manage.py apply``/``get`` and the REST API all go through here, so a document means the same
everywhere and errors name the document path (``spec.modules[1].name``) that is wrong.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, ClassVar

from django.db import models, transaction
from django.utils import timezone

from kernel.errors import ApplicationError, Conflict, ValidationFailed, summarize
from kernel.timefmt import rfc3339

from . import schema

STALE_MESSAGE = "the object has been modified; please apply your changes to the latest version and try again"

METADATA_PATHS = {
    "name": "metadata.name",
    "namespace": "metadata.namespace",
    "labels": "metadata.labels",
    "annotations": "metadata.annotations",
    "": "",
}


class ResourceKind:
    """One document kind. Subclasses set the class attributes and implement the three hooks."""

    api_version: ClassVar[str]
    kind: ClassVar[str]
    plural: ClassVar[str]
    aliases: ClassVar[tuple[str, ...]] = ()
    namespaced: ClassVar[bool] = True
    default_namespace: ClassVar[str] = "default"
    model: ClassVar[type[models.Model]]
    field_paths: ClassVar[dict[str, str]] = {}
    # Lower applies first within one multi-document apply (catalog before users of it).
    apply_order: ClassVar[int] = 50
    appliable: ClassVar[bool] = True
    listable: ClassVar[bool] = True
    read_only_reason: ClassVar[str] = ""
    # How help texts name the kind's documents in prose; the kind itself unless set.
    verbose_name: ClassVar[str] = ""

    # --- hooks ---------------------------------------------------------------------------------

    def spec_schema(self) -> dict:
        raise NotImplementedError

    def _apply(self, doc: dict[str, Any]) -> tuple[models.Model, bool]:
        """Create or update from a schema-valid document. Returns (object, created)."""
        raise NotImplementedError

    def to_document(self, obj: Any) -> dict[str, Any]:
        raise NotImplementedError

    def warnings(self, doc: dict[str, Any]) -> list[str]:
        """What is valid but probably a mistake (a channel no module offers): told, not refused."""
        return []

    # --- shared behaviour ----------------------------------------------------------------------

    @functools.cached_property
    def schema(self) -> dict:
        return schema.document(
            api_version=self.api_version, kind=self.kind, spec=self.spec_schema(), namespaced=self.namespaced
        )

    @property
    def paths(self) -> dict[str, str]:
        return {**METADATA_PATHS, **self.field_paths}

    def validate(self, doc: Any) -> None:
        problems = schema.schema_errors(self.schema, doc)
        if problems:
            raise ValidationFailed(summarize(problems), errors=problems)

    def apply(self, doc: Any, *, force: bool = False) -> ApplyResult:
        """Create or update from ``doc``. A ``metadata.resourceVersion`` other than the stored
        object's is a conflict (someone wrote it since the document was read) unless ``force``;
        without one the write is unconditional, like ``kubectl apply``."""
        if not self.appliable:
            raise ApplicationError(self.read_only_reason or f"{self.kind} cannot be applied")
        self.validate(doc)
        with transaction.atomic():
            if not force:
                self.check_resource_version(doc)
            before = self.existing_document(doc)
            try:
                obj, created = self._apply(doc)
            except ValidationFailed as exc:
                raise exc.remap(self.paths) from exc
        after = self.to_document(obj)
        if created:
            outcome = "created"
        elif before is not None and _comparable(before) == _comparable(after):
            outcome = "unchanged"
        else:
            outcome = "configured"
        return ApplyResult(kind=self, obj=obj, outcome=outcome, warnings=tuple(self.warnings(doc)))

    def check_resource_version(self, doc: dict[str, Any]) -> None:
        """Lock the stored object (until the transaction ends) and refuse a stale document.

        A version on a document whose object does not exist is ignored, so an exported document
        can recreate its object (as after a restore)."""
        wanted = doc["metadata"].get("resourceVersion")
        if not wanted:
            return
        namespace, name = self.identity(doc)
        stored = (
            self.select(namespace, name)
            .select_for_update(no_key=True)
            .values_list("resource_version", flat=True)
        )
        current = next(iter(stored), None)
        if current is not None and str(current) != wanted:
            key = f"{namespace}/{name}" if self.namespaced else name
            raise Conflict(
                f'Operation cannot be fulfilled on {self.plural} "{key}": {STALE_MESSAGE}',
                errors=[("metadata.resourceVersion", f"is {wanted}, the stored object is at {current}")],
            )

    def identity(self, doc: dict[str, Any]) -> tuple[str, str]:
        metadata = doc["metadata"]
        namespace = (metadata.get("namespace") or self.default_namespace) if self.namespaced else ""
        return namespace, metadata["name"]

    def queryset(self) -> models.QuerySet:
        return self.model.objects.all()

    def select(self, namespace: str | None = None, name: str | None = None) -> models.QuerySet:
        queryset = self.queryset()
        if namespace and self.namespaced:
            queryset = queryset.filter(namespace=namespace)
        if name:
            queryset = queryset.filter(name=name)
        return queryset

    def existing_document(self, doc: dict[str, Any]) -> dict[str, Any] | None:
        namespace, name = self.identity(doc)
        obj = self.select(namespace, name).first()
        return self.to_document(obj) if obj is not None else None

    def metadata(self, obj: Any, **extra: Any) -> dict[str, Any]:
        """Kubernetes-style metadata of a stored object (server fields included)."""
        meta: dict[str, Any] = {"name": obj.name}
        if self.namespaced:
            meta["namespace"] = obj.namespace
        meta["uid"] = str(obj.uid)
        meta["resourceVersion"] = str(obj.resource_version)
        meta["generation"] = obj.generation
        meta["creationTimestamp"] = _timestamp(obj.created_at)
        if obj.deletion_timestamp:
            meta["deletionTimestamp"] = _timestamp(obj.deletion_timestamp)
        if obj.finalizers:
            meta["finalizers"] = list(obj.finalizers)
        labels = {**obj.labels, **extra.pop("labels", {})}
        annotations = {**obj.annotations, **extra.pop("annotations", {})}
        if labels:
            meta["labels"] = labels
        if annotations:
            meta["annotations"] = annotations
        meta.update(extra)
        return meta

    def header(self) -> dict[str, str]:
        return {"apiVersion": self.api_version, "kind": self.kind}

    def columns(self) -> list[tuple[str, Callable[[Any], object]]]:
        """Columns of ``manage.py get`` tables (kubectl-like); kinds add their own in the middle."""
        first = [("NAMESPACE", lambda o: o.namespace)] if self.namespaced else []
        return [
            *first,
            ("NAME", lambda o: o.name),
            *self.extra_columns(),
            ("AGE", lambda o: _age(o.created_at)),
        ]

    def extra_columns(self) -> list[tuple[str, Callable[[Any], object]]]:
        return []


@dataclass(frozen=True)
class ApplyResult:
    kind: ResourceKind
    obj: Any
    outcome: str  # created | configured | unchanged
    warnings: tuple[str, ...] = ()

    @property
    def qualified_name(self) -> str:
        group = self.kind.api_version.rpartition("/")[0]
        qualified = f"{self.kind.kind.lower()}.{group}" if group else self.kind.kind.lower()
        return f"{qualified}/{self.obj.name}"

    def describe(self) -> str:
        return f"{self.qualified_name} {self.outcome}"


def _age(value: Any) -> str:

    seconds = int((timezone.now() - value).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _timestamp(value: Any) -> str | None:
    return rfc3339(value) if value else None


def _comparable(doc: dict[str, Any]) -> dict[str, Any]:
    keep = {k: v for k, v in doc.items() if k != "status"}
    keep["metadata"] = {
        k: v for k, v in doc.get("metadata", {}).items() if k not in ("generation", "resourceVersion")
    }
    return keep


_KINDS: dict[tuple[str, str], ResourceKind] = {}


def register(cls: type[ResourceKind]) -> type[ResourceKind]:
    _KINDS[(cls.api_version, cls.kind)] = cls()
    return cls


def kinds() -> list[ResourceKind]:
    return list(_KINDS.values())


def listable() -> list[ResourceKind]:
    """The kinds ``get``, ``describe`` and the lists show, by plural: what the commands' help
    texts and errors name, read here so a newly registered kind is named everywhere at once."""
    return sorted((kind for kind in _KINDS.values() if kind.listable), key=lambda kind: kind.plural)


def appliable() -> list[ResourceKind]:
    """The kinds a document may have, by kind name (as ``listable``, for ``apply``)."""
    return sorted((kind for kind in _KINDS.values() if kind.appliable), key=lambda kind: kind.kind)


def in_words(names: Iterable[str], last: str = "or") -> str:
    """``kymas, modules or watchers``: names as a sentence lists them."""
    names = list(names)
    return f"{', '.join(names[:-1])} {last} {names[-1]}" if len(names) > 1 else "".join(names)


def for_document(doc: Any) -> ResourceKind:
    if not isinstance(doc, dict):
        raise ValidationFailed("a document must be an object", errors=[("", "a document must be an object")])
    api_version, kind = doc.get("apiVersion"), doc.get("kind")
    for field, value in (("apiVersion", api_version), ("kind", kind)):
        if value is not None and not isinstance(value, str):
            reason = f"{field} must be a string, got {schema.type_name(value)}"
            raise ValidationFailed(reason, errors=[(field, reason)])
    found = _KINDS.get((api_version, kind))
    same_kind = [k.api_version for k in _KINDS.values() if k.kind == kind and k.appliable]
    if found is None and not kind:
        reason = f"kind is missing ({in_words(k.kind for k in appliable())})"
        raise ValidationFailed(reason, errors=[("kind", reason)])
    if found is None and same_kind:
        wanted = " or ".join(same_kind)
        reason = (
            f"apiVersion is missing: a {kind} needs apiVersion: {wanted}"
            if not api_version
            else f"unsupported apiVersion {api_version!r} for a {kind}; use {wanted}"
        )
        raise ValidationFailed(reason, errors=[("apiVersion", reason)])
    if found is None:
        known = ", ".join(f"{k.api_version} {k.kind}" for k in _KINDS.values() if k.appliable)
        reason = f"unsupported apiVersion/kind {api_version!r}/{kind!r}; supported: {known}"
        raise ValidationFailed(reason, errors=[("kind", reason)])
    return found


def for_name(name: str) -> ResourceKind:
    """Find a listable kind by plural, kind or alias, case-insensitively (kubectl habits)."""
    wanted = name.lower()
    for kind in _KINDS.values():
        names = {kind.plural, kind.kind.lower(), *kind.aliases}
        if kind.listable and wanted in names:
            return kind
    known = ", ".join(kind.plural for kind in listable())
    raise ApplicationError(f"unknown resource type {name!r}; use one of: {known}")


class DocumentsInvalid(ApplicationError):
    """Some documents of a multi-document apply failed; nothing was applied.

    ``errors`` name fields as ``documents[N].<path>`` (N counts from 0); ``failures`` keeps the
    per-document grouping for readable command-line output.
    """

    def __init__(self, failures: list[tuple[int, str, ApplicationError]]) -> None:
        errors = []
        for number, _, exc in failures:
            pairs = exc.errors or [("", exc.message)]
            errors.extend(
                (f"documents[{number}]{'.' + path if path else ''}", reason) for path, reason in pairs
            )
        total = len(failures)
        first = failures[0][2] if failures else None
        if all(isinstance(exc, Conflict) for _, _, exc in failures):
            self.status_code = Conflict.status_code  # only stale versions: retry with fresh ones
        # A stale document's answer says what every 409 says (the object has been modified...),
        # as the write of one document does; its field error still tells the versions apart.
        summary = (
            f"documents[{failures[0][0]}]: {first.message}"
            if isinstance(first, Conflict)
            else summarize(errors)
        )
        more = (
            f" (and {total - 1} more failed document{'s' if total > 2 else ''})"
            if isinstance(first, Conflict) and total > 1
            else ""
        )
        super().__init__(
            f"{total} document{'s' if total > 1 else ''} failed; nothing was applied: {summary}{more}",
            errors=errors,
        )
        self.failures = failures

    def lines(self) -> list[str]:
        out = []
        for number, label, exc in self.failures:
            out.append(f"document {number + 1} ({label}):")
            if isinstance(exc, Conflict):
                out.append(f"  {exc.message}")
            out.extend(
                f"  {path}: {reason}" if path else f"  {reason}"
                for path, reason in exc.errors or [("", exc.message)]
            )
        return out


def _label(doc: Any) -> str:
    if not isinstance(doc, dict):
        return "document"
    metadata = doc.get("metadata") if isinstance(doc.get("metadata"), dict) else {}
    name, namespace, kind = metadata.get("name"), metadata.get("namespace"), doc.get("kind")
    name = name if isinstance(name, str) and name else "?"
    namespace = namespace if isinstance(namespace, str) else ""
    kind = kind if isinstance(kind, str) and kind else "?"
    return f"{kind} {namespace + '/' if namespace else ''}{name}"


def apply_documents(docs: Iterable[Any], *, force: bool = False) -> list[ApplyResult]:
    """Apply every document or none: all are checked first, then applied in one transaction.

    ``force`` writes documents whose ``metadata.resourceVersion`` is stale (see ``apply``)."""
    docs = list(docs)
    failures: list[tuple[int, str, ApplicationError]] = []
    planned: list[tuple[int, ResourceKind, dict]] = []
    for number, doc in enumerate(docs):
        try:
            kind = for_document(doc)
            if not kind.appliable:
                raise ApplicationError(kind.read_only_reason or f"{kind.kind} cannot be applied")
            kind.validate(doc)
            planned.append((number, kind, doc))
        except ApplicationError as exc:
            failures.append((number, _label(doc), exc))
    # Documents that failed their checks are not applied, but the others still are (and rolled
    # back), so one run reports every problem of every document.
    planned.sort(key=lambda item: (item[1].apply_order, item[0]))
    results: dict[int, ApplyResult] = {}
    with transaction.atomic():
        for number, kind, doc in planned:
            try:
                results[number] = kind.apply(doc, force=force)
            except ApplicationError as exc:
                failures.append((number, _label(doc), exc))
        if failures:
            transaction.set_rollback(True)
    if failures:
        raise DocumentsInvalid(sorted(failures, key=lambda failure: failure[0]))
    return [results[number] for number in sorted(results)]
