"""Liveness, readiness and Prometheus metrics of a process."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from kernel import metrics as prometheus
from kernel.readiness import CORE_CHECKS, readiness


@never_cache
@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    """The process is up and serving."""
    return JsonResponse({"status": "ok"})


@never_cache
@require_GET
def readyz(request: HttpRequest) -> JsonResponse:
    """Ready when the database and the broker answer (503 with the reasons otherwise)."""
    status, body = readiness(CORE_CHECKS)
    return JsonResponse(body, status=status)


@never_cache
@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    payload, content_type = prometheus.exposition(accept=request.headers.get("Accept", ""))
    return HttpResponse(payload, content_type=content_type)
