"""The API's side of scopes: lists and lookups narrowed to the user's Kymas (the filter backend
of :mod:`access.filters`, which every viewset has), objects and documents checked before a write
(checks registered with ``kernel.api.permissions``), and the role bindings' own endpoint."""

from __future__ import annotations

from typing import Any

from django.db.models import Model
from drf_spectacular.utils import extend_schema_view
from rest_framework.permissions import SAFE_METHODS
from rest_framework.request import Request

from fleet.models import Kyma, SyncResource
from fleet.models.rollout import RolloutKind
from kernel.api.resources import ResourceViewSet, document_schema
from kernel.documents import registry
from kernel.documents.selectors import selects

from .documents import FleetRoleBindingKind
from .models import FleetRoleBinding
from .roles import CHANGE
from .scope import OutOfScope, is_scoped, require, require_all, require_labels, scope_of
from .services import binding_delete


def object_check(request: Request, view: Any, obj: Any) -> None:
    """A write to one object of a Kyma needs the change scope (403 naming the scope)."""
    if request.method in SAFE_METHODS or not isinstance(obj, Model):
        return
    require(request.user, obj, CHANGE)


def document_check(request: Request, docs: list) -> None:
    """Documents written by a scoped user: a Kyma stays (and was) inside the change scope, a
    SyncResource is for such a Kyma, a rollout reaches only such Kymas."""
    user = request.user
    if not is_scoped(user):
        return
    for doc in docs:
        if not isinstance(doc, dict) or not isinstance(doc.get("metadata"), dict):
            continue  # refused later with the document's own error
        kind, metadata = doc.get("kind"), doc["metadata"]
        spec = doc.get("spec") if isinstance(doc.get("spec"), dict) else {}
        namespace = metadata.get("namespace") or "kcp-system"
        if kind == "Kyma":
            labels = metadata.get("labels") if isinstance(metadata.get("labels"), dict) else {}
            require_labels(user, labels, CHANGE, what=f"Kyma {namespace}/{metadata.get('name')}")
            stored = Kyma.objects.filter(namespace=namespace, name=metadata.get("name")).first()
            if stored is not None:
                require(user, stored, CHANGE)
        elif kind == "SyncResource":
            kyma = Kyma.objects.filter(namespace=namespace, name=spec.get("kyma")).first()
            if kyma is not None:
                require(user, kyma, CHANGE)
            stored = SyncResource.objects.filter(namespace=namespace, name=metadata.get("name")).first()
            if stored is not None:
                require(user, stored, CHANGE)
        elif kind == "Rollout":
            rollout_reach_check(user, spec.get("change"))
        elif kind in ("FleetRoleBinding", "Module", "Watcher") and not scope_of(user, CHANGE).everything:
            raise OutOfScope(
                f"a {kind} concerns every runtime: only users whose scope is every runtime write it"
            )


def rollout_reach_check(user: Any, change: Any) -> None:
    """A rollout by hand reaches the Kymas its change selects; any other rollout every Kyma
    that uses its subject, so only a user whose scope is every runtime starts it."""
    if not isinstance(change, dict):
        return
    if change.get("kind") != RolloutKind.KYMA_SPEC:
        if not scope_of(user, CHANGE).everything:
            raise OutOfScope(
                f"a {change.get('kind')} rollout reaches every runtime using its subject: outside your scope"
            )
        return
    kymas = Kyma.objects.filter(deletion_timestamp__isnull=True)
    if isinstance(change.get("namespace"), str) and change["namespace"]:
        kymas = kymas.filter(namespace=change["namespace"])
    selector = change.get("selector") if isinstance(change.get("selector"), dict) else None
    try:
        reached = [k for k in kymas.only("id", "namespace", "name", "labels") if selects(selector, k.labels)]
    except (KeyError, TypeError):
        return  # a selector of the wrong shape is refused by the document's schema
    require_all(user, reached, CHANGE, what="this rollout")


KIND = registry.for_document(
    {"apiVersion": FleetRoleBindingKind.api_version, "kind": FleetRoleBindingKind.kind}
)


@extend_schema_view(**document_schema(KIND, tags=["access"]))
class FleetRoleBindingViewSet(ResourceViewSet):
    """Role bindings: a role (viewer, auditor, operator, fleet-admin) for identity-provider groups
    and users, over the Kymas a label selector picks (none: every Kyma). Every change is audited."""

    kind = KIND
    queryset = FleetRoleBinding.objects.all()
    ordering = ("name",)

    def delete_object(self, obj: FleetRoleBinding) -> bool:
        return binding_delete(obj)
