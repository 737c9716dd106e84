"""``/favicon.ico``: browsers ask for it on every page; answer "no icon" instead of a logged 404."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.views.decorators.cache import cache_control
from django.views.decorators.http import require_GET


@require_GET
@cache_control(public=True, max_age=86400)
def favicon(request: HttpRequest) -> HttpResponse:
    """204 No Content, cached for a day: no ``Not Found: /favicon.ico`` in the web role's log."""
    return HttpResponse(status=204)
