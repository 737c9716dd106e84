"""A generic viewset for document kinds: list, get, apply (POST/PUT), delete.

Views stay thin: they parse and authorise, then call the kind (which calls the services) and
render the document. ``{id}`` in URLs is the object's ``metadata.uid``, or (like kubectl)
``NAMESPACE/NAME`` of a namespaced object and ``NAME`` of a cluster-scoped one.
"""

from __future__ import annotations

import uuid
from typing import Any, ClassVar

from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status, viewsets
from rest_framework.exceptions import PermissionDenied
from rest_framework.generics import get_object_or_404
from rest_framework.request import Request
from rest_framework.response import Response

from kernel.api.permissions import check_documents
from kernel.documents.registry import ResourceKind
from kernel.errors import ValidationFailed

ERROR_SCHEMA = {
    "type": "object",
    "properties": {
        "detail": {"type": "string"},
        "errors": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"field": {"type": "string"}, "reason": {"type": "string"}},
            },
        },
    },
}


def _list_schema(doc_schema: dict) -> dict:
    return {
        "type": "object",
        "properties": {
            "count": {"type": "integer"},
            "next": {"type": ["string", "null"]},
            "previous": {"type": ["string", "null"]},
            "results": {"type": "array", "items": doc_schema},
        },
    }


UID = r"[0-9a-fA-F-]{36}"
# A uid-shaped namespace is not a namespace: ``{uid}/kubeconfig/`` stays the uid's action.
NAMESPACED_LOOKUP = rf"{UID}|(?!{UID}/)[a-z0-9-]{{1,63}}/[a-z0-9.-]{{1,253}}"
CLUSTER_LOOKUP = rf"{UID}|[a-z0-9.-]{{1,253}}"


def _uuid(value: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(value)
    except ValueError:
        return None


class DocumentSerializer(serializers.Serializer):
    """Only for the browsable API's raw-data form: the document of ``instance`` (or a skeleton
    of a new one) as the form's initial content. Reads and writes never go through it: the kind
    validates and renders documents itself."""

    def to_representation(self, instance: Any) -> dict[str, Any]:
        return self.context["view"].document(instance)

    def get_initial(self) -> dict[str, Any]:
        view = self.context["view"]
        if view.action not in ("list", "create"):
            return {}  # an action's own body (a kubeconfig, a status), not a document
        kind: ResourceKind = view.kind
        metadata = {"name": "", "namespace": kind.default_namespace} if kind.namespaced else {"name": ""}
        return {**kind.header(), "metadata": metadata, "spec": {}}


class ResourceReadViewSet(viewsets.GenericViewSet):
    """List and read documents of one kind."""

    kind: ClassVar[ResourceKind]
    lookup_field = "uid"
    lookup_url_kwarg = "id"
    lookup_value_regex = UID
    ordering: ClassVar[tuple[str, ...]] = ("namespace", "name")

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        kind = cls.__dict__.get("kind")
        if kind is not None:
            cls.lookup_value_regex = NAMESPACED_LOOKUP if kind.namespaced else CLUSTER_LOOKUP

    def get_object(self) -> Any:
        """The object named by uid, NAMESPACE/NAME (namespaced kinds) or NAME (cluster-scoped)."""
        value = self.kwargs[self.lookup_url_kwarg]
        queryset = self.filter_queryset(self.get_queryset())
        if "/" in value:
            namespace, name = value.split("/", 1)
            obj = get_object_or_404(queryset, namespace=namespace, name=name)
        elif self.kind.namespaced:
            obj = get_object_or_404(queryset, uid=value)
        else:
            uid = _uuid(value)
            by_uid = queryset.filter(uid=uid).first() if uid is not None else None
            obj = by_uid or get_object_or_404(queryset, name=value)
        self.check_object_permissions(self.request, obj)
        return obj

    def get_queryset(self) -> QuerySet:
        return self.kind.queryset().order_by(*self.ordering)

    def get_serializer_class(self) -> type[serializers.Serializer]:
        return DocumentSerializer

    def get_serializer(self, *args: Any, **kwargs: Any) -> serializers.Serializer:
        """The browsable API's PUT form starts from the object's current document."""
        document_form = self.action in ("retrieve", "update", "destroy")
        if (
            document_form
            and not args
            and kwargs.get("instance") is None
            and self.lookup_url_kwarg in self.kwargs
        ):
            kwargs["instance"] = self.get_object()
        return super().get_serializer(*args, **kwargs)

    def document(self, obj: Any) -> dict[str, Any]:
        return self.kind.to_document(obj)

    def list(self, request: Request) -> Response:
        queryset = self.filter_queryset(self.get_queryset())
        page = self.paginate_queryset(queryset)
        return self.get_paginated_response([self.document(obj) for obj in page])

    def retrieve(self, request: Request, id: str) -> Response:
        return Response(self.document(self.get_object()))


class ResourceViewSet(ResourceReadViewSet):
    """CRUD on one document kind; subclasses set ``kind`` and implement ``delete_object``."""

    def _apply(self, request: Request, doc: Any, *, expected: Any = None) -> Response:
        if not isinstance(doc, dict):
            raise ValidationFailed("the body must be one document (an object)")
        if expected is not None:
            self._check_identity(doc, expected)
        existing = self.kind.existing_document(doc) if self._valid(doc) else None
        self.authorize_write(request, doc, existing)
        check_documents(request, [doc])
        result = self.kind.apply(doc)
        code = status.HTTP_201_CREATED if result.outcome == "created" else status.HTTP_200_OK
        return Response(self.document(result.obj), status=code)

    def authorize_write(self, request: Request, doc: dict, existing: dict | None) -> None:
        """Refuse (``PermissionDenied``) a write the caller may not make. The permission class
        checked "add" for POST; updating an existing object through POST needs "change" too."""
        if existing is not None and not request.user.has_perm(self._perm("change")):
            raise PermissionDenied(f"you may not change {self.kind.plural}")

    def _valid(self, doc: dict) -> bool:
        try:
            self.kind.validate(doc)
        except ValidationFailed:
            return False
        return True

    def _check_identity(self, doc: dict, expected: Any) -> None:
        metadata = doc.get("metadata") if isinstance(doc.get("metadata"), dict) else {}
        problems = []
        if metadata.get("name") != expected.name:
            problems.append(
                ("metadata.name", f"must be {expected.name!r}, the name of the object at this URL")
            )
        if (
            self.kind.namespaced
            and metadata.get("namespace", self.kind.default_namespace) != expected.namespace
        ):
            problems.append(
                ("metadata.namespace", f"must be {expected.namespace!r}, as the object at this URL")
            )
        if problems:
            raise ValidationFailed("the document names another object than the URL", errors=problems)

    def _perm(self, action: str) -> str:
        meta = self.kind.model._meta
        return f"{meta.app_label}.{action}_{meta.model_name}"

    def create(self, request: Request) -> Response:
        return self._apply(request, request.data)

    def update(self, request: Request, id: str) -> Response:
        return self._apply(request, request.data, expected=self.get_object())

    def destroy(self, request: Request, id: str) -> Response:
        obj = self.get_object()
        gone = self.delete_object(obj)
        if gone:
            return Response(status=status.HTTP_204_NO_CONTENT)
        obj.refresh_from_db()
        return Response(self.document(obj), status=status.HTTP_202_ACCEPTED)

    def delete_object(self, obj: Any) -> bool:
        """Begin deleting ``obj``; True when it is gone at once."""
        raise NotImplementedError


def document_schema(
    kind: ResourceKind, *, tags: list[str], descriptions: dict[str, str] | None = None
) -> dict[str, Any]:
    """``extend_schema_view`` arguments documenting a kind with its own JSON Schema."""
    doc = kind.schema
    error = {400: ERROR_SCHEMA, 401: ERROR_SCHEMA, 403: ERROR_SCHEMA, 404: ERROR_SCHEMA}
    descriptions = descriptions or {}
    return {
        "list": extend_schema(
            tags=tags, responses={200: _list_schema(doc)}, description=descriptions.get("list")
        ),
        "retrieve": extend_schema(tags=tags, responses={200: doc, **error}),
        "create": extend_schema(
            tags=tags,
            request={"application/json": doc, "application/yaml": doc},
            responses={200: doc, 201: doc, **error},
            description=f"Create or update (apply) a {kind.kind} from its document.",
        ),
        "update": extend_schema(
            tags=tags,
            request={"application/json": doc, "application/yaml": doc},
            responses={200: doc, **error},
        ),
        "destroy": extend_schema(
            tags=tags,
            responses={202: doc, 204: None, **error},
            description="Deletion is two-step: 202 while the object is Deleting (its cleanup runs), "
            "204 once it is gone.",
        ),
    }


ID_PARAMETER = OpenApiParameter(
    "id",
    str,
    OpenApiParameter.PATH,
    description="metadata.uid of the object, or NAMESPACE/NAME (NAME for a cluster-scoped kind)",
)
