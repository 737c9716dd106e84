"""Every API error is JSON: ``{"detail": "...", "errors": [{"field": "...", "reason": "..."}]}``."""

from __future__ import annotations

import logging
from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponsePermanentRedirect, JsonResponse
from django.urls import Resolver404, resolve
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import APIView
from rest_framework.views import exception_handler as drf_exception_handler

from kernel import audit
from kernel.dberrors import database_unavailable
from kernel.documents.schema import format_path
from kernel.errors import ApplicationError, error_body, summarize
from kernel.sealing import SealedSecretError

log = logging.getLogger(__name__)


def _flatten(detail: Any, path: list[str | int]) -> list[tuple[str, str]]:
    if isinstance(detail, dict):
        found = []
        for key, value in detail.items():
            sub = path if key in ("non_field_errors", "__all__") else [*path, key]
            found.extend(_flatten(value, sub))
        return found
    if isinstance(detail, list):
        if all(not isinstance(item, dict | list) for item in detail):
            return [(format_path(path), str(item)) for item in detail]
        found = []
        for index, item in enumerate(detail):
            found.extend(_flatten(item, [*path, index]))
        return found
    return [(format_path(path), str(detail))]


# How long a client waits before it retries when the database cannot take its request.
DATABASE_RETRY_AFTER = 1


WRITE_ACTIONS = {"POST": "create", "PUT": "update", "PATCH": "update", "DELETE": "delete"}


def exception_handler(exc: Exception, context: dict) -> Response | None:
    response = _answer(exc, context)
    request = context.get("request")
    if response is not None and request is not None and 400 <= response.status_code < 500:
        action = WRITE_ACTIONS.get(request.method)
        if action is not None:
            _record_refused_write(exc, context, action, response)
    return response


def _record_refused_write(exc: Exception, context: dict, action: str, response: Response) -> None:
    """A refused write is in the audit trail too: who tried what, and why it was refused."""
    request, view = context["request"], context.get("view")
    kwargs = getattr(view, "kwargs", {}) or {}
    kind = getattr(getattr(view, "kind", None), "kind", "") or getattr(view, "basename", "") or ""
    body = getattr(request, "_full_data", None)  # parsed already, or not at all: never parse here
    metadata = body.get("metadata") if isinstance(body, dict) else None
    name = metadata.get("name") if isinstance(metadata, dict) else None
    namespace = metadata.get("namespace") if isinstance(metadata, dict) else None
    target = str(kwargs.get("id", ""))
    if "/" in target:
        namespace, name = target.split("/", 1)
    if isinstance(view, APIView) and view.__class__.__name__ == "ApplyView":
        action = "apply"
    elif getattr(view, "action", None) not in (None, "create", "update", "partial_update", "destroy"):
        action = str(view.action)[:32]  # an operator's action on an object (pause, revoke, ...)
    reason = response.data.get("detail", "") if isinstance(response.data, dict) else str(exc)
    try:
        audit.record_refusal(
            exc if getattr(exc, "failures", None) else ApplicationError(str(reason)),
            action=action,
            kind=str(kind),
            namespace=namespace if isinstance(namespace, str) else "",
            name=name if isinstance(name, str) else ("" if "/" in target else target),
            uid=target if len(target) == 36 and "/" not in target else "",
            actor=audit.actor_of_request(request),
        )
    except Exception:  # the answer must go out even if the trail cannot take it now
        log.exception("could not record a refused write in the audit trail")


def _answer(exc: Exception, context: dict) -> Response | None:
    if database_unavailable(exc):
        # The database is out of connections (e.g. many watches opening at once), restarting or
        # unreachable: the request was not taken, and the client retries, as after any 503.
        log.warning("database unavailable for %s: %s", getattr(context.get("request"), "path", "?"), exc)
        return Response(
            error_body("the database cannot take the request now; retry shortly"),
            status=status.HTTP_503_SERVICE_UNAVAILABLE,
            headers={"Retry-After": str(DATABASE_RETRY_AFTER)},
        )
    if isinstance(exc, ApplicationError):
        return Response(error_body(exc.message, exc.errors), status=exc.status_code)
    if isinstance(exc, SealedSecretError):
        log.error("secret decryption failed: %s", exc)
        return Response(error_body(str(exc)), status=status.HTTP_500_INTERNAL_SERVER_ERROR)
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied()
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, exceptions.ValidationError):
        errors = _flatten(exc.detail, [])
        response.data = error_body(summarize(errors), errors)
    else:
        detail = exc.detail if isinstance(exc, exceptions.APIException) else str(exc)
        response.data = error_body(str(detail))
    return response


def api_not_found(request: HttpRequest, path: str = "") -> HttpResponse:
    """The answer to every URL under ``/api/`` that names no endpoint: the JSON error shape, not
    Django's HTML page. A missing trailing slash is redirected on reads (as Django's
    ``APPEND_SLASH`` did) and named in the 404 on writes, whose body a redirect would lose."""
    slashed = request.path + "/"
    if not request.path.endswith("/") and _is_endpoint(slashed):
        if request.method in ("GET", "HEAD"):
            query = request.META.get("QUERY_STRING", "")
            return HttpResponsePermanentRedirect(slashed + (f"?{query}" if query else ""))
        return JsonResponse(
            error_body(f"no API endpoint at {request.path}; did you mean {slashed}?"), status=404
        )
    return JsonResponse(error_body(f"no API endpoint at {request.path}"), status=404)


def _is_endpoint(path: str) -> bool:
    try:
        return resolve(path).func is not api_not_found
    except Resolver404:
        return False
