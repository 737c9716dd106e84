"""What a request Django refuses before any view understood it is told: a short 4xx naming the
problem, JSON (``{"detail": ...}``) for the API and for machines, a plain page for a browser, and
never a traceback, with or without ``DJANGO_DEBUG``.

Django refuses such requests by raising: ``DisallowedHost`` (a Host header not in ``ALLOWED_HOSTS``),
``TooManyFieldsSent``/``TooManyFilesSent``/``RequestDataTooBig`` (form bodies past the
``DATA_UPLOAD_*`` limits), other ``SuspiciousOperation``\\ s, ``BadRequest`` and
``MultiPartParserError``. Its answer is ``handler400``'s in production (an HTML "Bad Request (400)"
by default) and, with ``DEBUG``, the technical page: 80-130 KB of HTML with the traceback and the
settings, for whoever sent the request. Three pieces replace it:

* ``kernel.middleware.BadRequestRefusal`` checks the Host header and parses form bodies before any
  other middleware does, and turns what a view raises into this answer (both modes, JSON included);
* ``bad_request`` is the project's ``handler400``, for what is raised elsewhere in production;
* ``QuietExceptionReporter`` (``DEFAULT_EXCEPTION_REPORTER``) is the last resort under ``DEBUG``:
  Django's page for a refusal becomes this one line (a real 500 keeps its debug page).
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.core.exceptions import (
    BadRequest,
    DisallowedHost,
    RequestDataTooBig,
    SuspiciousOperation,
    TooManyFieldsSent,
    TooManyFilesSent,
)
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.http.multipartparser import MultiPartParserError
from django.http.request import split_domain_port
from django.utils.html import escape
from django.views import debug

from kernel.errors import error_body

#: What Django raises for a request it will not serve (its own answer: a 400).
REFUSED = (SuspiciousOperation, BadRequest, MultiPartParserError)
QUOTED = 100  # characters of the client's input a message quotes at most


def _shown(text: str) -> str:
    """The client's text as a message may quote it: ASCII (escapes for the rest), bounded."""
    shown = text.encode("ascii", "backslashreplace").decode("ascii")
    return shown if len(shown) <= QUOTED else shown[:QUOTED] + "..."


def _raw_host(request: HttpRequest) -> str:
    """The host the request names, as ``HttpRequest.get_host`` reads it (without checking it)."""
    meta = request.META
    if settings.USE_X_FORWARDED_HOST and "HTTP_X_FORWARDED_HOST" in meta:
        return meta["HTTP_X_FORWARDED_HOST"]
    return meta.get("HTTP_HOST") or meta.get("SERVER_NAME", "")


def describe(request: HttpRequest, exc: BaseException) -> tuple[int, str]:
    """(status, detail) for a refused request: what the client did, in its terms."""
    if isinstance(exc, DisallowedHost):
        host = _raw_host(request)
        domain, _ = split_domain_port(host)
        if domain:
            return 400, f"the Host header {_shown(host)!r} names no host this server answers to"
        return 400, f"the Host header {_shown(host)!r} is not a valid host name"
    if isinstance(exc, RequestDataTooBig):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        return 413, f"request body is larger than the {limit:,} bytes accepted"
    if isinstance(exc, TooManyFieldsSent):
        return 400, f"the request has more than {settings.DATA_UPLOAD_MAX_NUMBER_FIELDS:,} fields"
    if isinstance(exc, TooManyFilesSent):
        return 400, f"the request has more than {settings.DATA_UPLOAD_MAX_NUMBER_FILES:,} files"
    said = str(exc).strip()
    return 400, f"bad request: {_shown(said)}" if said else "bad request"


def _wants_html(request: HttpRequest) -> bool:
    """A browser (it asks for HTML first), outside the API; everyone else reads JSON."""
    if request.path.startswith("/api/"):
        return False
    try:
        return request.get_preferred_type(["application/json", "text/html"]) == "text/html"
    except ValueError:
        return False


def page(status: int, detail: str) -> str:
    title = "Request Entity Too Large (413)" if status == 413 else f"Bad Request ({status})"
    return (
        f'<!doctype html>\n<html lang="en"><head><title>{title}</title></head>\n'
        f"<body><h1>{title}</h1><p>{escape(detail)}</p></body></html>\n"
    )


def refusal(request: HttpRequest, exc: BaseException) -> HttpResponse:
    """The answer to a refused request; logged as Django logs it (``django.security.<Name>`` for
    a suspicious one), in one line: it is the client's mistake, not a fault to trace."""
    status, detail = describe(request, exc)
    name = (
        f"django.security.{type(exc).__name__}" if isinstance(exc, SuspiciousOperation) else "django.request"
    )
    logging.getLogger(name).warning("%s %s refused: %s", request.method, request.path, detail)
    if _wants_html(request):
        return HttpResponse(page(status, detail), status=status, content_type="text/html; charset=utf-8")
    return JsonResponse(error_body(detail), status=status)


def bad_request(request: HttpRequest, exception: BaseException | None = None) -> HttpResponse:
    """``handler400``: Django's answer to a refused request in production."""
    return refusal(request, exception if exception is not None else BadRequest())


class QuietExceptionReporter(debug.ExceptionReporter):
    """``DEBUG``'s error page, except for a refused request: its one-line reason, no traceback
    nor settings (Django renders the technical page for those with status 400)."""

    def _detail(self) -> str | None:
        if self.exc_value is None or not isinstance(self.exc_value, REFUSED) or self.request is None:
            return None
        return describe(self.request, self.exc_value)[1]

    def get_traceback_html(self) -> str:
        detail = self._detail()
        return super().get_traceback_html() if detail is None else page(400, detail)

    def get_traceback_text(self) -> str:
        detail = self._detail()
        return super().get_traceback_text() if detail is None else detail + "\n"
