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

from kernel.api_tokens import TokenExpired, api_token_authenticate, is_api_token_key


class ApiTokenAuthentication(BaseAuthentication):
    """Named API tokens (``kcp_…`` keys); any other key is left to the classes after this one."""

    keywords = ("token", "bearer")

    def authenticate(self, request: Request) -> tuple[Any, Any] | None:
        parts = get_authorization_header(request).split()
        if len(parts) != 2 or parts[0].lower().decode("latin-1") not in self.keywords:
            return None
        try:
            key = parts[1].decode()
        except UnicodeDecodeError:
            return None
        if not is_api_token_key(key):
            return None
        try:
            token = api_token_authenticate(key)
        except TokenExpired as exc:
            raise AuthenticationFailed(str(exc)) from exc
        if token is None:
            raise AuthenticationFailed("Invalid token.")
        if not token.user.is_active:
            raise AuthenticationFailed("User inactive or deleted.")
        return token.user, token

    def authenticate_header(self, request: Request) -> str:
        return "Token"


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
