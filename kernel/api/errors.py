"""Every API error is JSON: ``{"detail": "...", "errors": [{"field": "...", "reason": "..."}]}``."""

from __future__ import annotations

import logging
from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.http import Http404
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

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


def exception_handler(exc: Exception, context: dict) -> Response | None:
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
