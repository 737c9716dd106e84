"""API authentication: named, expiring ``ApiToken`` keys first, then DRF's older tokens.

``Authorization: Token <key>`` and ``Authorization: Bearer <key>`` are both accepted: Kubernetes
clients and most HTTP tools send bearer tokens, and answering them "credentials were not
provided" sent users looking for a missing header. Both keywords find the same token.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework.authentication import BaseAuthentication, TokenAuthentication, get_authorization_header
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.request import Request

from kernel.api_tokens import KEY_PREFIX, KeyRefused, api_token_authenticate


class IssuedKeyAuthentication(BaseAuthentication):
    """Keys that start with ``marker`` (``Token <key>`` or ``Bearer <key>``); any other key is
    left to the classes after this one. Subclasses find the key's owner in ``identify``."""

    keywords = ("token", "bearer")
    marker: str = KEY_PREFIX

    def authenticate(self, request: Request) -> tuple[Any, Any] | None:
        parts = get_authorization_header(request).split()
        if len(parts) != 2 or parts[0].lower().decode("latin-1") not in self.keywords:
            return None
        try:
            key = parts[1].decode()
        except UnicodeDecodeError:
            return None
        if not key.startswith(self.marker):
            return None
        try:
            return self.identify(key)
        except KeyRefused as exc:
            raise AuthenticationFailed(str(exc)) from exc

    def identify(self, key: str) -> tuple[Any, Any]:
        """(user, auth) of ``key``; raises ``AuthenticationFailed`` or ``KeyRefused``."""
        raise NotImplementedError

    def authenticate_header(self, request: Request) -> str:
        return "Token"


class ApiTokenAuthentication(IssuedKeyAuthentication):
    """Named API tokens (``kcp_…`` keys): they act as their user."""

    def identify(self, key: str) -> tuple[Any, Any]:
        token = api_token_authenticate(key)
        if token is None:
            raise AuthenticationFailed("Invalid token.")
        if not token.user.is_active:
            raise AuthenticationFailed("User inactive or deleted.")
        return token.user, token


class ScopedPrincipal:
    """Who a request acts as when it is not a person: no Django permissions at all, only what
    the views that know the principal allow. ``refusal`` is the 403's reason everywhere else
    (``StaffModelPermissions`` shows it instead of a bare "permission denied")."""

    is_authenticated = True
    is_anonymous = False
    is_active = True
    is_staff = False
    is_superuser = False
    pk = None
    id = None

    def has_perm(self, perm: str, obj: Any = None) -> bool:
        return False

    def has_perms(self, perms: Any, obj: Any = None) -> bool:
        return False

    def has_module_perms(self, app_label: str) -> bool:
        return False

    def refusal(self, request: Request) -> str:
        raise NotImplementedError


class BearerTokenAuthentication(TokenAuthentication):
    keyword = "Bearer"


class ApiTokenScheme(OpenApiAuthenticationExtension):
    """The OpenAPI security scheme of named API tokens (sent as ``Token <key>`` or ``Bearer <key>``)."""

    target_class = ApiTokenAuthentication
    name = "apiToken"

    def get_security_definition(self, auto_schema: object) -> dict[str, str]:
        return {
            "type": "apiKey",
            "in": "header",
            "name": "Authorization",
            "description": "`Token <key>` or `Bearer <key>` with a named API token",
        }


class BearerTokenScheme(OpenApiAuthenticationExtension):
    """The OpenAPI security scheme of the Bearer keyword (its own name beside DRF's ``tokenAuth``)."""

    target_class = BearerTokenAuthentication
    name = "bearerAuth"

    def get_security_definition(self, auto_schema: object) -> dict[str, str]:
        return {"type": "http", "scheme": "bearer", "description": "the same API token as `Token <key>`"}
