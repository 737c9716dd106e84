"""API of rollouts: the documents (list, get, apply one by hand) and the operator's actions."""

from __future__ import annotations

from collections.abc import Callable

from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import status
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response

from fleet.filtersets import RolloutFilterSet
from fleet.models import Rollout
from fleet.resources.rollouts import RolloutKindDocument
from fleet.rollouts import services as rollout_services
from kernel.api.resources import ERROR_SCHEMA, ResourceViewSet, document_schema
from kernel.documents import registry

KIND = registry.for_document(
    {"apiVersion": RolloutKindDocument.api_version, "kind": RolloutKindDocument.kind}
)
ACTIONS: dict[str, tuple[Callable[..., Rollout], str]] = {
    "pause": (rollout_services.rollout_pause, "No further wave starts until it is resumed."),
    "resume": (
        rollout_services.rollout_resume,
        "Go on: after a pause where it was; after a failed gate with the next wave (its failures accepted).",
    ),
    "abort": (
        rollout_services.rollout_abort,
        "Stop: runtimes it changed keep the new target, the others keep the old one.",
    ),
    "rollback": (rollout_services.rollout_rollback, "Every runtime it changed gets its old target again."),
}


def _documented(name: str) -> Callable:
    return extend_schema(
        tags=["rollouts"],
        request=None,
        responses={200: KIND.schema, 403: ERROR_SCHEMA, 404: ERROR_SCHEMA, 409: ERROR_SCHEMA},
        description=ACTIONS[name][1] + " 409 when the rollout's state does not allow it.",
    )


@extend_schema_view(**document_schema(KIND, tags=["rollouts"]))
class RolloutViewSet(ResourceViewSet):
    """Rollouts: a change that reaches many runtimes, in waves with a gate between them. POST applies
    one by hand; PUT may only flip ``spec.paused``; DELETE only a completed or superseded one."""

    kind = KIND
    queryset = Rollout.objects.all()
    filterset_class = RolloutFilterSet
    ordering = ("-created_at", "-id")

    def _act(self, request: Request, name: str) -> Response:
        if not request.user.has_perm("controlplane.change_rollout"):
            raise PermissionDenied("you may not change rollouts")
        rollout = ACTIONS[name][0](rollout=self.get_object(), user=request.user)
        return Response(self.document(Rollout.objects.get(pk=rollout.pk)))

    @_documented("pause")
    @action(detail=True, methods=["post"])
    def pause(self, request: Request, id: str) -> Response:
        return self._act(request, "pause")

    @_documented("resume")
    @action(detail=True, methods=["post"])
    def resume(self, request: Request, id: str) -> Response:
        return self._act(request, "resume")

    @_documented("abort")
    @action(detail=True, methods=["post"])
    def abort(self, request: Request, id: str) -> Response:
        return self._act(request, "abort")

    @_documented("rollback")
    @action(detail=True, methods=["post"])
    def rollback(self, request: Request, id: str) -> Response:
        return self._act(request, "rollback")

    def delete_object(self, obj: Rollout) -> bool:
        """Only the record of a rollout that holds nothing any more can go."""
        rollout_services.rollout_delete(rollout=obj)
        return True

    def destroy(self, request: Request, id: str) -> Response:
        self.delete_object(self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)
