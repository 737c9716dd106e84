"""The OpenID provider as the relying party sees it: its endpoints (from the provider's
discovery document unless set one by one), and the login, callback and logout views of
mozilla-django-oidc with PKCE, with a provider that cannot be reached answered as a message on
the login page instead of a 500.

Endpoints are read from ``<OIDC_ISSUER>/.well-known/openid-configuration`` at the first login of
each process (not at start: a provider that is down must not stop the control plane starting),
and kept; ``OIDC_OP_*`` settings take precedence when set.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import requests
from django.conf import settings
from django.contrib import messages
from django.contrib.auth import logout
from django.core.exceptions import ImproperlyConfigured, SuspiciousOperation
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from mozilla_django_oidc import views as oidc_views
from mozilla_django_oidc.utils import import_from_settings

log = logging.getLogger(__name__)

# Django setting → key of the discovery document.
DISCOVERED = {
    "OIDC_OP_AUTHORIZATION_ENDPOINT": "authorization_endpoint",
    "OIDC_OP_TOKEN_ENDPOINT": "token_endpoint",
    "OIDC_OP_USER_ENDPOINT": "userinfo_endpoint",
    "OIDC_OP_JWKS_ENDPOINT": "jwks_uri",
    "OIDC_OP_LOGOUT_ENDPOINT": "end_session_endpoint",
}
_discovery: dict[str, Any] | None = None
_lock = threading.Lock()


class ProviderUnreachable(Exception):
    """The provider's discovery document could not be read."""


def issuer() -> str:
    return settings.OIDC_ISSUER.rstrip("/")


def discovery() -> dict[str, Any]:
    """The provider's discovery document (read once per process)."""
    global _discovery
    with _lock:
        if _discovery is None:
            url = f"{issuer()}/.well-known/openid-configuration"
            try:
                answer = requests.get(url, timeout=settings.OIDC_TIMEOUT, verify=settings.OIDC_VERIFY_SSL)
                answer.raise_for_status()
                document = answer.json()
            except (requests.RequestException, ValueError) as exc:
                raise ProviderUnreachable(f"the OpenID provider's discovery document ({url}): {exc}") from exc
            if not isinstance(document, dict) or document.get("issuer", "").rstrip("/") != issuer():
                raise ProviderUnreachable(f"{url} is not the discovery document of issuer {issuer()}")
            _discovery = document
        return _discovery


def forget_discovery() -> None:
    global _discovery
    with _lock:
        _discovery = None


def setting(name: str, *default: Any) -> Any:
    """A mozilla-django-oidc setting: Django's when set, else the provider's discovery document."""
    value = getattr(settings, name, None)
    if value not in (None, "") or name not in DISCOVERED:
        return import_from_settings(name, *default)
    found = discovery().get(DISCOVERED[name])
    if found:
        return found
    if default:
        return default[0]
    raise ImproperlyConfigured(
        f"{name} is not set and the provider's discovery document has no {DISCOVERED[name]}"
    )


def _refused(request: HttpRequest, reason: str) -> HttpResponse:
    log.warning("single sign-on failed: %s", reason)
    messages.error(request, f"Single sign-on failed: {reason}")
    return HttpResponseRedirect(reverse("admin:login"))


class LoginView(oidc_views.OIDCAuthenticationRequestView):
    """``/oidc/authenticate/``: off to the provider (authorization code, PKCE S256, nonce)."""

    get_settings = staticmethod(setting)

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not settings.OIDC_ISSUER:
            return _refused(request, "it is not configured (OIDC_ISSUER)")
        try:
            self.OIDC_OP_AUTH_ENDPOINT = setting("OIDC_OP_AUTHORIZATION_ENDPOINT")
        except ProviderUnreachable as exc:
            return _refused(request, str(exc))
        return super().dispatch(request, *args, **kwargs)

    def __init__(self, *args: Any, **kwargs: Any) -> None:  # endpoints are read in dispatch
        super(oidc_views.OIDCAuthenticationRequestView, self).__init__(*args, **kwargs)
        self.OIDC_RP_CLIENT_ID = settings.OIDC_RP_CLIENT_ID


class CallbackView(oidc_views.OIDCAuthenticationCallbackView):
    """``/oidc/callback/``: the provider's answer; a login or a message on the login page."""

    get_settings = staticmethod(setting)

    def get(self, request: HttpRequest) -> HttpResponse:
        if request.GET.get("error"):
            super().get(request)  # drops the state, as the library does
            return _refused(request, str(request.GET.get("error_description") or request.GET["error"])[:300])
        try:
            return super().get(request)
        except ProviderUnreachable as exc:
            return _refused(request, str(exc))
        except requests.RequestException as exc:
            return _refused(request, f"the provider did not answer as expected ({type(exc).__name__})")
        except SuspiciousOperation as exc:
            return _refused(request, str(exc)[:300])

    def login_failure(self) -> HttpResponse:
        return _refused(self.request, "the provider's answer was not accepted (your account may be inactive)")


class LogoutView(oidc_views.OIDCLogoutView):
    """``/oidc/logout/`` (POST): ends every session of the user here, then the provider's."""

    get_settings = staticmethod(setting)

    def post(self, request: HttpRequest) -> HttpResponse:
        if request.user.is_authenticated:
            logout(request)  # the logout signal ends the user's other sessions too
        return HttpResponseRedirect(reverse("admin:login"))
