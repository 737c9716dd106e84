"""The WatchEvent contract served through Django REST framework, for bench/listener.py's DRF row.

The same contract and the same services as the bespoke ``listener.app``: an authentication class
reads the client certificate (``listener.identity``), a permission admits only a runtime's
certificate, a serializer validates the body into the same ``WatchEvent``, and the view calls
``listener.services.watch_event_accept``. What differs is only the request handling around it
(Django's handler, DRF's request, parsers, negotiation, renderer), which is what the row measures.
"""

from __future__ import annotations

from typing import Any

from rest_framework import serializers
from rest_framework.authentication import BaseAuthentication
from rest_framework.exceptions import AuthenticationFailed, ValidationError
from rest_framework.parsers import JSONParser
from rest_framework.permissions import BasePermission
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from listener import services
from listener.app import COMPONENT
from listener.events import CONTRACTS, EventInvalid, WatchEvent, object_key
from listener.identity import ClientIdentity, IdentityError, client_identity


class Runtime:
    """The "user" of a request: a runtime watcher, known by its client certificate."""

    is_authenticated = True

    def __init__(self, identity: ClientIdentity) -> None:
        self.identity = identity


class ClientCertificateAuthentication(BaseAuthentication):
    def authenticate(self, request: Request) -> tuple[Runtime, ClientIdentity]:
        try:
            identity = client_identity(request._request.META)  # the WSGI environ: gunicorn.socket
        except IdentityError as exc:
            raise AuthenticationFailed(exc.message) from exc
        return Runtime(identity), identity

    def authenticate_header(self, request: Request) -> str:
        return 'Certificate realm="runtime-watcher"'


class IsRuntime(BasePermission):
    def has_permission(self, request: Request, view: Any) -> bool:
        return isinstance(request.user, Runtime)


class ObjectKeyField(serializers.Field):
    def to_internal_value(self, data: Any) -> Any:
        try:
            return object_key(data, self.field_name, name_required=True)
        except EventInvalid as exc:
            raise ValidationError(str(exc)) from exc


class GvkSerializer(serializers.Serializer):
    group = serializers.CharField(allow_blank=True, required=False, default="")
    version = serializers.CharField()
    kind = serializers.CharField()


class WatchEventSerializer(serializers.Serializer):
    watched = ObjectKeyField()
    watchedGvk = GvkSerializer()  # the wire name
    owner = ObjectKeyField(required=False)

    def to_event(self, contract: str, component: str) -> WatchEvent:
        data = self.validated_data
        gvk = data["watchedGvk"]
        owner = data.get("owner") if contract == "v1" else None
        if contract == "v1" and (owner is None or not owner.namespace):
            raise ValidationError({"owner": "owner with a namespace is required in contract v1"})
        return WatchEvent(
            contract, component, data["watched"], gvk["group"], gvk["version"], gvk["kind"], owner
        )


class WatchEventView(APIView):
    authentication_classes = (ClientCertificateAuthentication,)
    permission_classes = (IsRuntime,)
    parser_classes = (JSONParser,)
    renderer_classes = (JSONRenderer,)

    def post(self, request: Request, contract: str, component: str) -> Response:
        if contract not in CONTRACTS or not COMPONENT.match(component):
            raise ValidationError("bad contract or component in the path")
        services.route_for(component)
        serializer = WatchEventSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        event = serializer.to_event(contract, component)
        accepted = services.watch_event_accept(event=event, identity=request.auth)
        return Response(accepted.body())
