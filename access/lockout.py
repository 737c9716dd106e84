"""Failed logins (django-axes): who is locked out, what they are told, and which address counts.

Behind an ingress every client comes from the ingress's address; the client's own is the last
address the ingress appended to ``X-Forwarded-For``, trusted only from ``WEB_TRUSTED_PROXIES``
(otherwise anyone could name an address and dodge, or aim, the per-address limit)."""

from __future__ import annotations

import ipaddress
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render

from kernel.errors import error_body


def _trusted(address: str) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in ipaddress.ip_network(net, strict=False) for net in settings.WEB_TRUSTED_PROXIES)


def client_address(request: HttpRequest) -> str:
    remote = str(request.META.get("REMOTE_ADDR", ""))
    forwarded = str(request.META.get("HTTP_X_FORWARDED_FOR", ""))
    if forwarded and _trusted(remote):
        last = forwarded.split(",")[-1].strip()
        try:
            return str(ipaddress.ip_address(last))
        except ValueError:
            return remote
    return remote


def locked_out(request: HttpRequest, response: Any, credentials: Any) -> HttpResponse:
    """429 with the reason and how long: the login page again in a browser, JSON otherwise."""
    minutes = f"{settings.LOGIN_LOCKOUT_MINUTES:g}"
    reason = (
        f"too many failed logins from this account or address: try again in {minutes} minutes, "
        "or ask an administrator to unlock it"
    )
    if "text/html" not in request.headers.get("Accept", ""):
        return JsonResponse(error_body(reason), status=429)
    # Rendered here: axes answers from its middleware, after the view layer renders responses.
    return render(request, "admin/locked_out.html", {"reason": reason, "title": "Locked out"}, status=429)
