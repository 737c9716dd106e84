"""Liveness, readiness and Prometheus metrics of a process."""

from __future__ import annotations

import logging
import time

from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from controlplane import metrics as prometheus
from controlplane.celery import app

log = logging.getLogger(__name__)


@never_cache
@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    """The process is up and serving."""
    return JsonResponse({"status": "ok"})


def _check_database() -> str | None:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception as exc:
        return f"database unreachable: {type(exc).__name__}: {exc}"
    return None


def _check_broker() -> str | None:
    try:
        with app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, interval_start=0, interval_step=0, timeout=2)
    except Exception as exc:
        return f"broker unreachable: {type(exc).__name__}: {exc}"
    return None


@never_cache
@require_GET
def readyz(request: HttpRequest) -> JsonResponse:
    """Ready when the database and the broker answer (503 with the reasons otherwise)."""
    started = time.monotonic()
    checks = {"database": _check_database(), "broker": _check_broker()}
    failing = {name: problem for name, problem in checks.items() if problem}
    body = {
        "status": "unavailable" if failing else "ok",
        "checks": {name: (problem or "ok") for name, problem in checks.items()},
        "seconds": round(time.monotonic() - started, 3),
    }
    if failing:
        log.warning("not ready: %s", "; ".join(failing.values()))
    return JsonResponse(body, status=503 if failing else 200)


@never_cache
@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    payload, content_type = prometheus.exposition()
    return HttpResponse(payload, content_type=content_type)
