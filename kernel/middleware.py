"""Middleware of the web role that must run before anything reads a request."""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse

from kernel.badrequests import REFUSED, refusal
from kernel.errors import error_body

# A refused body is read and thrown away up to this many bytes: a client sends its whole body
# before it reads the answer (requests, http.client), and a connection closed on unread data is
# reset, so the client would never see the 413 (as nginx's lingering close does, bounded).
DRAIN_LIMIT = 64 * 1024 * 1024


class RequestBodyLimit:
    """Bodies declared larger than ``DATA_UPLOAD_MAX_MEMORY_SIZE`` are refused with 413 and the JSON
    error shape before anything reads them into memory, with or without ``DJANGO_DEBUG`` (Django's
    own ``RequestDataTooBig`` became an HTML page: the debug page, or a bare 400 in production).

    The rest of the body is read and thrown away in small pieces (up to ``DRAIN_LIMIT``), never
    held, so the client reads the answer and the connection stays usable."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        declared = request.META.get("CONTENT_LENGTH") or ""
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        if limit is not None and declared.isdigit() and int(declared) > limit:
            left = min(int(declared), DRAIN_LIMIT)
            while left > 0 and (chunk := request.read(min(left, 65536))):
                left -= len(chunk)
            detail = f"request body of {int(declared):,} bytes is larger than the {limit:,} bytes accepted"
            return JsonResponse(error_body(detail), status=413)
        return self.get_response(request)


FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")
API_PREFIX = "/api/"


class BadRequestRefusal:
    """A request Django would refuse with its HTML 400 page (the technical one, traceback and
    settings included, under ``DJANGO_DEBUG``) gets ``kernel.badrequests``' answer instead: a short
    4xx naming the problem, JSON for the API and machines.

    Django raises these from wherever it first reads the request: the Host header in the common,
    security and CSRF middleware, a form body's field and file counts in the CSRF middleware or the
    view. An exception there never reaches another middleware, so both are read here first (a form
    body is parsed once, as the CSRF middleware would parse it anyway; Django keeps the result),
    and what a view raises is answered in ``process_exception``. Not under ``/api/``: the API reads
    JSON and YAML only and skips the CSRF check, so nothing parses a form posted there, and it
    answers 415 before reading it."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        try:
            request.get_host()
            if (
                request.method == "POST"
                and request.content_type in FORM_TYPES
                and not request.path.startswith(API_PREFIX)
            ):
                request.POST  # noqa: B018 - parsed now, so its limits are checked now
        except REFUSED as exc:
            return refusal(request, exc)
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        return refusal(request, exception) if isinstance(exception, REFUSED) else None
