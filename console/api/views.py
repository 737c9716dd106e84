"""API views of the core domain."""

from __future__ import annotations

import hashlib
from typing import Any, ClassVar

from django.conf import settings
from django.db.models import QuerySet
from django.http import StreamingHttpResponse
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import status
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from access.scope import WatchScope, is_scoped
from console.api import credentials as credential_views
from console.api.authentication import ModuleScopedPermissions, module_credential, refuse_other_module
from fleet.filtersets import (
    KymaFilterSet,
    ModuleConfigFilterSet,
    ModuleFilterSet,
    SyncResourceFilterSet,
)
from fleet.jobs import services as job_services
from fleet.models import Kyma, Module, ModuleConfig, SyncResource
from fleet.models.moduleconfig import MODULE_CONFIG_STATUS_SCHEMA
from fleet.resources.kinds import KymaKind, ModuleConfigKind, ModuleKind, SyncResourceKind
from fleet.selectors import kyma_has_module_config
from fleet.services import kymas as kyma_services
from fleet.services import modules as module_services
from fleet.services import revisions
from fleet.services import watches as watch_services
from kernel.api.authentication import ScopedPrincipal
from kernel.api.permissions import check_documents
from kernel.api.resources import ERROR_SCHEMA, ResourceReadViewSet, ResourceViewSet, document_schema
from kernel.documents import registry
from kernel.documents.schema import schema_errors
from kernel.documents.yamlio import dump_yaml
from kernel.errors import ApplicationError, ValidationFailed

from . import watch

KUBECONFIG_STATE = {"type": "object", "properties": {"set": {"type": "boolean"}}}
RECONCILE_ANSWER = {
    "type": "object",
    "properties": {"queued": {"type": "boolean"}, "detail": {"type": "string"}},
}
RECONCILE_SELECTION_ANSWER = {
    "type": "object",
    "properties": {
        "selected": {"type": "integer"},
        "queued": {"type": "integer"},
        "covered": {"type": "integer", "description": "already had a reconcile queued"},
        "job": {"type": "integer", "description": "the job that queues a large selection"},
        "detail": {"type": "string"},
    },
}


def _kind(cls: type) -> Any:
    return registry.for_document({"apiVersion": cls.api_version, "kind": cls.kind})


@extend_schema_view(**document_schema(_kind(KymaKind), tags=["kymas"]))
class KymaViewSet(ResourceViewSet):
    """Kymas, one per runtime, in upstream's ``operator.kyma-project.io/v1beta2`` shape: addressed by
    ``metadata.uid`` or ``NAMESPACE/NAME``; a write naming a stale ``metadata.resourceVersion`` is a 409."""

    kind = _kind(KymaKind)
    queryset = Kyma.objects.all()
    filterset_class = KymaFilterSet

    def delete_object(self, obj: Kyma) -> bool:
        return kyma_services.kyma_delete(kyma=obj)

    @extend_schema(tags=["kymas"], request=None, responses={202: RECONCILE_ANSWER, 503: ERROR_SCHEMA})
    @action(detail=True, methods=["post"])
    def reconcile(self, request: Request, id: str) -> Response:
        """Queue a reconcile now (coalesced with one already queued)."""
        self._may_reconcile(request)
        kyma = self.get_object()
        done = job_services.kymas_reconcile_now(kyma_ids=[kyma.pk], user=request.user)
        detail = "reconcile queued" if done.queued else "a reconcile is already queued"
        return Response({"queued": bool(done.queued), "detail": detail}, status=status.HTTP_202_ACCEPTED)

    @extend_schema(
        tags=["kymas"],
        operation_id="v1_kymas_reconcile_selection",
        request=None,
        parameters=[OpenApiParameter("all", bool, description="select every Kyma (no filter needed)")],
        responses={202: RECONCILE_SELECTION_ANSWER, 400: ERROR_SCHEMA, 503: ERROR_SCHEMA},
        description="Reconcile now every Kyma the list filters select (the admin's action): up to "
        f"{job_services.RECONCILE_JOB_THRESHOLD} are queued at once, more become a job. Without a "
        "filter, ?all=true is required.",
    )
    @action(detail=False, methods=["post"], url_path="reconcile")
    def reconcile_selection(self, request: Request) -> Response:
        self._may_reconcile(request)
        filters = set(request.query_params) & set(self.filterset_class.base_filters)
        if not filters and request.query_params.get("all") != "true":
            raise ValidationFailed(
                "name the Kymas to reconcile with the list's filters, or pass ?all=true for every Kyma",
                errors=[("all", "required without a filter")],
            )
        ids = list(self.filter_queryset(self.get_queryset()).values_list("pk", flat=True))
        done = job_services.kymas_reconcile_now(kyma_ids=ids, user=request.user)
        if done.job is not None:
            answer = {"selected": len(ids), "job": done.job.pk, "detail": f"job {done.job.pk} queues them"}
        else:
            answer = {"selected": len(ids), "queued": len(done.queued), "covered": done.covered}
        return Response(answer, status=status.HTTP_202_ACCEPTED)

    @staticmethod
    def _may_reconcile(request: Request) -> None:
        if not request.user.has_perm("controlplane.change_kyma"):
            raise PermissionDenied("you may not reconcile Kymas")

    @extend_schema(
        tags=["kymas"],
        methods=["PUT"],
        request={"application/yaml": {"type": "string"}, "application/json": {"type": "object"}},
        responses={204: None, 400: ERROR_SCHEMA},
        description="Set the runtime's kubeconfig (write-only; stored encrypted). "
        'Body: the kubeconfig as YAML, or JSON {"kubeconfig": "<yaml text>"}.',
    )
    @extend_schema(tags=["kymas"], methods=["GET"], responses={200: KUBECONFIG_STATE})
    @extend_schema(tags=["kymas"], methods=["DELETE"], responses={204: None})
    @action(detail=True, methods=["get", "put", "delete"])
    def kubeconfig(self, request: Request, id: str) -> Response:
        kyma = self.get_object()
        if request.method == "GET":
            return Response({"set": bool(kyma.kubeconfig)})
        if not request.user.has_perm("controlplane.change_kyma"):
            raise PermissionDenied("you may not change Kymas")
        if request.method == "DELETE":
            kyma_services.kyma_set_kubeconfig(kyma=kyma, kubeconfig="")
            return Response(status=status.HTTP_204_NO_CONTENT)
        kyma_services.kyma_set_kubeconfig(kyma=kyma, kubeconfig=_kubeconfig_text(request))
        return Response(status=status.HTTP_204_NO_CONTENT)


def _kubeconfig_text(request: Request) -> str:
    data = request.data
    if isinstance(data, dict) and set(data) == {"kubeconfig"} and isinstance(data["kubeconfig"], str):
        return data["kubeconfig"]
    if isinstance(data, dict) and "clusters" in data:
        return dump_yaml([data])
    raise ValidationFailed(
        "expected a kubeconfig",
        errors=[("kubeconfig", 'send the kubeconfig as YAML, or JSON {"kubeconfig": "<yaml text>"}')],
    )


@extend_schema_view(**document_schema(_kind(ModuleKind), tags=["modules"]))
class ModuleViewSet(ResourceViewSet):
    """The module catalog: each Module's channels, its CR in the runtimes, its manager, manifest policy,
    versions and rollout policy; addressed by ``metadata.uid`` or ``NAME``."""

    kind = _kind(ModuleKind)
    queryset = Module.objects.all()
    filterset_class = ModuleFilterSet
    ordering = ("name",)

    def delete_object(self, obj: Module) -> bool:
        module_services.module_delete(module=obj)
        return True

    @extend_schema(
        tags=["modules"],
        methods=["GET"],
        responses={200: credential_views.LIST_SCHEMA, 403: ERROR_SCHEMA},
        description="The module manager's credentials (never their keys).",
    )
    @extend_schema(
        tags=["modules"],
        methods=["POST"],
        request={"application/json": credential_views.CREATE_BODY},
        responses={201: credential_views.CREATED_SCHEMA, 400: ERROR_SCHEMA, 403: ERROR_SCHEMA},
        description="Create a credential for the module's manager; the answer's `token` is the only "
        "time the key is shown.",
    )
    @action(detail=True, methods=["get", "post"], permission_classes=[IsAuthenticated])
    def credentials(self, request: Request, id: str) -> Response:
        module = self.get_object()
        if request.method == "GET":
            return credential_views.credentials_list(request, module)
        return credential_views.credentials_create(request, module)

    @extend_schema(
        tags=["modules"],
        request=None,
        responses={200: credential_views.CREDENTIAL_SCHEMA, 403: ERROR_SCHEMA, 404: ERROR_SCHEMA},
        description="Revoke a credential for good: its key answers 401 from now on (the record stays).",
    )
    @action(
        detail=True,
        methods=["post"],
        url_path=r"credentials/(?P<credential>[^/]{1,100})/revoke",
        permission_classes=[IsAuthenticated],
    )
    def revoke_credential(self, request: Request, id: str, credential: str) -> Response:
        return credential_views.credentials_revoke(request, self.get_object(), credential)


class ModuleScopedViewSet(ResourceReadViewSet):
    """Objects that belong to a module. A module manager's credential sees and writes only its own
    module's (lists hold only those; another module's object is 403 naming both modules)."""

    permission_classes = (ModuleScopedPermissions,)
    module_actions: ClassVar[frozenset[str]] = frozenset()

    def filter_queryset(self, queryset: QuerySet) -> QuerySet:
        queryset = super().filter_queryset(queryset)
        credential = module_credential(self.request)
        if credential is None or self.action != "list":
            return queryset  # one object: 403 naming both modules, rather than a silent 404
        asked = self.request.query_params.get("module")
        if asked is not None:
            refuse_other_module(credential, f"?module={asked}", asked)
        return queryset.filter(module_id=credential.module_id)


_MODULECONFIG_DOCS = document_schema(
    _kind(ModuleConfigKind),
    tags=["moduleconfigs"],
    descriptions={
        "list": "Ordered by revision. Module managers catch up with ?since_revision=N "
        "(N = the highest metadata.resourceVersion they have seen). With &watch=true the answer is "
        "a stream of changes, one JSON object per line: "
        '{"type": "ADDED|MODIFIED|DELETED|BOOKMARK", "object": {...}}, resumable from any '
        "resourceVersion received (watch parameters: module, since_revision, timeoutSeconds; "
        "429 beyond MODULECONFIG_WATCH_PER_CREDENTIAL open watches of one credential)."
    },
)


@extend_schema_view(list=_MODULECONFIG_DOCS["list"], retrieve=_MODULECONFIG_DOCS["retrieve"])
class ModuleConfigViewSet(ModuleScopedViewSet):
    kind = _kind(ModuleConfigKind)
    module_actions = frozenset({"list", "retrieve", "status"})
    queryset = ModuleConfig.objects.all()
    filterset_class = ModuleConfigFilterSet
    # Written by the control plane; module managers only report status (the action below).
    ordering = ("revision",)

    def dispatch(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        """A watch takes its turn to open (:class:`watch.OpeningTurn`) before authentication
        queries the database; the stream gives it back after its catch-up."""
        if request.method != "GET" or not _watch_asked(request.GET) or "id" in kwargs:
            return super().dispatch(request, *args, **kwargs)
        self._opening = watch.OpeningTurn()
        try:
            return super().dispatch(request, *args, **kwargs)
        finally:
            if not isinstance(getattr(self, "_stream", None), watch.WatchStream):
                self._opening.release()  # refused before streaming

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Any:
        if _watch_asked(request.query_params):
            return self._watch(request)
        return super().list(request, *args, **kwargs)

    def _watch(self, request: Request) -> StreamingHttpResponse:
        params = request.query_params
        unknown = sorted(set(params) - WATCH_PARAMETERS)
        if unknown:
            raise ValidationFailed(
                "a watch takes only module, since_revision and timeoutSeconds",
                errors=[(name, "not supported with watch=true") for name in unknown],
            )
        since = _whole_number(params, "since_revision", 0)
        timeout = _whole_number(params, "timeoutSeconds", int(settings.MODULECONFIG_WATCH_TIMEOUT))
        timeout = min(max(timeout, 1), settings.MODULECONFIG_WATCH_TIMEOUT)
        module = params.get("module", "")
        credential = module_credential(request)
        if credential is not None:  # a module manager watches its own module only
            if module:
                refuse_other_module(credential, f"?module={module}", module)
            module = credential.module.name
        if since > watch.committed_revision():
            raise RevisionFromElsewhere(
                f"since_revision {since} is newer than this control plane's latest revision "
                f"({watch.committed_revision()}): its data was reset or restored; start again from 0"
            )
        compacted = revisions.moduleconfig_compacted_revision()
        if 0 < since < compacted:
            raise RevisionFromElsewhere(
                f"since_revision {since} is too old: deletions up to revision {compacted} were pruned "
                "(MODULECONFIG_DELETIONS_KEPT_DAYS); start again from 0"
            )
        if module and not Module.objects.filter(name=module).exists():
            raise ValidationFailed(
                "unknown module", errors=[("module", f"no module {module!r} in the catalog")]
            )
        opening = getattr(self, "_opening", None)
        if opening is not None and not opening.held:
            raise WatchCapacityFull(
                f"this web process could not open the watch within {watch.OPENING_WAIT:.0f} s "
                "(others are opening); retry shortly"
            )
        if not watch.CAPACITY.acquire(blocking=False):
            raise WatchCapacityFull(
                f"this web process already serves {settings.WEB_WATCH_THREADS} watches (WEB_WATCH_THREADS); "
                "retry shortly (another process may have room)"
            )
        try:
            slot = watch_services.watch_slot_claim(credential=_credential(request), module=module)
        except BaseException:
            watch.CAPACITY.release()
            raise
        visible = WatchScope(request.user) if credential is None and is_scoped(request.user) else None
        stream = watch.WatchStream(
            since=since, module=module, slot_id=slot.pk, timeout=timeout, turn=opening, visible=visible
        )
        self._stream = stream
        response = StreamingHttpResponse(stream, content_type="application/json;stream=watch")
        response["Cache-Control"] = "no-cache"
        response["X-Accel-Buffering"] = "no"  # a buffering proxy would hold the lines back
        return response

    @extend_schema(
        tags=["moduleconfigs"],
        request={"application/json": MODULE_CONFIG_STATUS_SCHEMA},
        responses={200: {"type": "object"}, 400: ERROR_SCHEMA},
    )
    @action(detail=True, methods=["put"])
    def status(self, request: Request, id: str) -> Response:
        """The module manager reports the state of its module in this runtime."""
        config = self.get_object()
        problems = schema_errors(MODULE_CONFIG_STATUS_SCHEMA, request.data, "status")
        if problems:
            raise ValidationFailed("invalid status", errors=problems)
        module_services.moduleconfig_set_status(config=config, status=request.data)
        config.refresh_from_db()
        return Response(self.document(config))


WATCH_PARAMETERS = {"watch", "module", "since_revision", "timeoutSeconds", "allowWatchBookmarks"}


class RevisionFromElsewhere(ApplicationError):
    status_code = 410
    code = "gone"


class WatchCapacityFull(ApplicationError):
    status_code = 503
    code = "watch_capacity_full"


def _watch_asked(params: Any) -> bool:
    return params.get("watch") in ("true", "1")


def _whole_number(params: Any, name: str, default: int) -> int:
    value = params.get(name)
    if value is None or value == "":
        return default
    if not value.isdigit():
        raise ValidationFailed(f"invalid {name}", errors=[(name, "a whole number >= 0 is required")])
    return int(value)


def _credential(request: Request) -> str:
    """What the per-credential watch bound counts: the authenticated token (its table and id,
    hashed: a legacy DRF token's id is its key), else the session's user."""
    auth = request.auth
    pk = getattr(auth, "pk", None)
    if pk is not None:
        digest = hashlib.sha256(str(pk).encode()).hexdigest()[:32]
        return f"{auth._meta.label_lower}:{digest}"
    return f"user:{request.user.pk}"


@extend_schema_view(**document_schema(_kind(SyncResourceKind), tags=["syncresources"]))
class SyncResourceViewSet(ModuleScopedViewSet, ResourceViewSet):
    """Manifests a module's manager wants in one runtime, applied there by its reconcile; a module
    credential writes only its module's, and each manifest must pass the module's manifest policy."""

    kind = _kind(SyncResourceKind)
    queryset = SyncResource.objects.all()
    filterset_class = SyncResourceFilterSet
    module_actions = frozenset({"list", "retrieve", "create", "update", "destroy"})

    def authorize_write(self, request: Request, doc: dict, existing: dict | None) -> None:
        """A module credential writes its own module's SyncResources, for Kymas using the module."""
        credential = module_credential(request)
        if credential is None:
            super().authorize_write(request, doc, existing)
            return
        spec = doc.get("spec") if isinstance(doc.get("spec"), dict) else {}
        metadata = doc.get("metadata") if isinstance(doc.get("metadata"), dict) else {}
        module, kyma = spec.get("module"), spec.get("kyma")
        namespace = metadata.get("namespace") or self.kind.default_namespace
        if isinstance(module, str):
            refuse_other_module(credential, f"SyncResource {namespace}/{metadata.get('name')}", module)
        own = credential.module.name
        if (
            isinstance(kyma, str)
            and Kyma.objects.filter(namespace=namespace, name=kyma).exists()
            and not kyma_has_module_config(namespace=namespace, name=kyma, module_id=credential.module_id)
        ):
            raise PermissionDenied(
                f"this credential belongs to module {own}; Kyma {namespace}/{kyma} does not use module "
                f"{own} (it has no {own} ModuleConfig)"
            )

    def delete_object(self, obj: SyncResource) -> bool:
        return module_services.syncresource_delete(resource=obj)


APPLY_RESULT = {
    "type": "object",
    "properties": {
        "results": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "apiVersion": {"type": "string"},
                    "kind": {"type": "string"},
                    "namespace": {"type": "string"},
                    "name": {"type": "string"},
                    "uid": {"type": "string"},
                    "outcome": {"enum": ["created", "configured", "unchanged"]},
                },
            },
        }
    },
}


class ApplyView(APIView):
    """``POST /api/v1/apply/``: many documents of any kinds, all applied or none (like kubectl
    apply -f, but atomic)."""

    # Permissions are per kind, checked below.
    permission_classes = ()

    @extend_schema(
        tags=["apply"],
        request={"application/yaml": {"type": "string"}, "application/json": {"type": "array"}},
        responses={200: APPLY_RESULT, 400: ERROR_SCHEMA},
    )
    def post(self, request: Request) -> Response:
        if not request.user or not request.user.is_authenticated:
            raise PermissionDenied("authentication required")
        if isinstance(request.user, ScopedPrincipal):
            raise PermissionDenied(request.user.refusal(request))
        docs = request.data if isinstance(request.data, list) else [request.data]
        for doc in docs:
            try:
                kind = registry.for_document(doc)
            except ApplicationError:
                continue  # apply_documents reports it with the document's position
            if kind.appliable:
                meta = kind.model._meta
                wanted = [f"{meta.app_label}.{verb}_{meta.model_name}" for verb in ("add", "change")]
                if not request.user.has_perms(wanted):
                    raise PermissionDenied(f"you may not apply {kind.plural}")
        check_documents(request, docs)
        results = registry.apply_documents(docs)
        return Response(
            {
                "results": [
                    {
                        "apiVersion": r.kind.api_version,
                        "kind": r.kind.kind,
                        "namespace": getattr(r.obj, "namespace", ""),
                        "name": r.obj.name,
                        "uid": str(r.obj.uid),
                        "outcome": r.outcome,
                    }
                    for r in results
                ]
            }
        )
