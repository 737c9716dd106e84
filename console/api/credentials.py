"""``/api/v1/modules/{id}/credentials/``: staff create (key shown once), list and revoke a
module manager's credentials."""

from __future__ import annotations

from typing import Any

from django.utils import timezone
from django.utils.dateparse import parse_datetime
from rest_framework import status
from rest_framework.exceptions import PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response

from fleet.models import Module, ModuleCredential
from fleet.services import credentials as credential_services
from kernel.api.authentication import ScopedPrincipal
from kernel.errors import NotFound, ValidationFailed
from kernel.timefmt import rfc3339

CREDENTIAL_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "module": {"type": "string"},
        "prefix": {"type": "string", "description": "the key's first characters"},
        "state": {"enum": ["Active", "Expired", "Revoked"]},
        "createdAt": {"type": "string", "format": "date-time"},
        "createdBy": {"type": ["string", "null"]},
        "expiresAt": {"type": ["string", "null"], "format": "date-time"},
        "lastUsedAt": {"type": ["string", "null"], "format": "date-time"},
        "revokedAt": {"type": ["string", "null"], "format": "date-time"},
    },
}
CREATED_SCHEMA = {
    **CREDENTIAL_SCHEMA,
    "properties": {
        **CREDENTIAL_SCHEMA["properties"],
        "token": {"type": "string", "description": "the key: shown in this answer only, never again"},
    },
}
CREATE_BODY = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 100},
        "expiresAt": {"type": "string", "format": "date-time", "description": "empty: never expires"},
    },
    "required": ["name"],
    "additionalProperties": False,
}
LIST_SCHEMA = {"type": "object", "properties": {"results": {"type": "array", "items": CREDENTIAL_SCHEMA}}}


def _time(value: Any) -> str | None:
    return rfc3339(value) if value else None


def credential_document(credential: ModuleCredential) -> dict[str, Any]:
    creator = credential.created_by
    return {
        "name": credential.name,
        "module": credential.module.name,
        "prefix": credential.prefix,
        "state": credential.key_state,
        "createdAt": _time(credential.created_at),
        "createdBy": creator.get_username() if creator is not None else None,
        "expiresAt": _time(credential.expires_at),
        "lastUsedAt": _time(credential.last_used_at),
        "revokedAt": _time(credential.revoked_at),
    }


def _require(request: Request, verb: str) -> None:
    """Staff with the module-credential permission ``verb``; never a module credential."""
    if isinstance(request.user, ScopedPrincipal):
        raise PermissionDenied(request.user.refusal(request))
    if not request.user.has_perm(f"controlplane.{verb}_modulecredential"):
        raise PermissionDenied(f"you may not {'see' if verb == 'view' else verb} module credentials")


def _expiry(body: dict[str, Any]) -> Any:
    text = body.get("expiresAt")
    if text in (None, ""):
        return None
    moment = parse_datetime(text) if isinstance(text, str) else None
    if moment is None or moment.tzinfo is None:
        raise ValidationFailed(
            "invalid expiresAt", errors=[("expiresAt", "expected an RFC 3339 time with a time zone")]
        )
    if moment <= timezone.now():
        raise ValidationFailed("invalid expiresAt", errors=[("expiresAt", "is in the past")])
    return moment


def credentials_list(request: Request, module: Module) -> Response:
    _require(request, "view")
    credentials = module.credentials.select_related("module", "created_by").order_by("name")
    return Response({"results": [credential_document(c) for c in credentials]})


def credentials_create(request: Request, module: Module) -> Response:
    _require(request, "add")
    body = request.data
    if (
        not isinstance(body, dict)
        or not isinstance(body.get("name"), str)
        or set(body) - {"name", "expiresAt"}
    ):
        raise ValidationFailed(
            "expected {name, expiresAt?}",
            errors=[("name", 'send {"name": "...", "expiresAt": "<RFC 3339, optional>"}')],
        )
    try:
        credential, key = credential_services.module_credential_create(
            module=module, name=body["name"], expires_at=_expiry(body), created_by=request.user
        )
    except ValidationFailed as exc:
        raise exc.remap({"": "name", "expires_at": "expiresAt"}) from exc
    return Response({**credential_document(credential), "token": key}, status=status.HTTP_201_CREATED)


def credentials_revoke(request: Request, module: Module, name: str) -> Response:
    _require(request, "change")
    credential = module.credentials.select_related("module", "created_by").filter(name=name).first()
    if credential is None:
        raise NotFound(f"module {module.name} has no credential {name!r}")
    credential_services.module_credential_revoke(credential=credential)
    return Response(credential_document(credential))
