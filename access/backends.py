"""Authentication backends: single sign-on, the local password (break-glass), and the model
permissions that role bindings give.

``AUTHENTICATION_BACKENDS`` (settings) puts django-axes first (a locked-out account or address
gets no further), then :class:`OIDCBackend`, :class:`LocalPasswordBackend` and
:class:`RoleBackend`."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.backends import BaseBackend, ModelBackend
from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import Permission
from django.core.exceptions import SuspiciousOperation
from django.http import HttpRequest
from mozilla_django_oidc.auth import OIDCAuthenticationBackend

from . import oidc
from .roles import ADMIN, AUDIT, GRANTS, PERMISSIONS, SCOPED_ADMIN_EXTRA
from .scope import bindings_of, is_scoped
from .services import identity_login

_ALL_PERMISSIONS: frozenset[str] | None = None


def all_permissions() -> frozenset[str]:
    """Every permission there is, as ``app_label.codename`` (read once per process)."""
    global _ALL_PERMISSIONS
    if _ALL_PERMISSIONS is None:
        _ALL_PERMISSIONS = frozenset(
            f"{app}.{codename}"
            for app, codename in Permission.objects.values_list("content_type__app_label", "codename")
        )
    return _ALL_PERMISSIONS


def _expand(patterns: tuple[str, ...] | list[str]) -> set[str]:
    every = all_permissions()
    found: set[str] = set()
    for pattern in patterns:
        if pattern == "*":
            return set(every)
        if pattern.endswith("*"):
            found.update(perm for perm in every if perm.startswith(pattern[:-1]))
        elif pattern in every:
            found.add(pattern)
    return found


def role_permissions(user: Any) -> set[str]:
    """The Django permissions ``user``'s bindings give (cached on the user for the request)."""
    cached = getattr(user, "_access_permissions", None)
    if cached is not None:
        return cached
    patterns: list[str] = []
    for binding in bindings_of(user):
        for capability in GRANTS.get(binding.role, ()):
            if capability == ADMIN and binding.selector:
                patterns.extend(SCOPED_ADMIN_EXTRA)  # administration of the whole fleet needs all of it
                continue
            if capability == AUDIT and binding.selector:
                patterns.append("kernel.view_auditentry")  # its Kymas' entries; failed logins are fleet-wide
                continue
            patterns.extend(PERMISSIONS[capability])
    user._access_permissions = permissions = _expand(patterns)
    return permissions


class RoleBackend(BaseBackend):
    """Permissions from role bindings; authenticates nobody."""

    def get_all_permissions(self, user_obj: Any, obj: Any = None) -> set[str]:
        if not user_obj.is_active or user_obj.is_anonymous or obj is not None:
            return set()
        return role_permissions(user_obj)

    def has_perm(self, user_obj: Any, perm: str, obj: Any = None) -> bool:
        return perm in self.get_all_permissions(user_obj, obj)

    def has_module_perms(self, user_obj: Any, app_label: str) -> bool:
        return any(perm.startswith(f"{app_label}.") for perm in self.get_all_permissions(user_obj))


class LocalPasswordBackend(ModelBackend):
    """Django's passwords, while ``LOCAL_LOGIN`` allows them: ``on`` for everyone with a password,
    ``break-glass`` for superusers only (the administrator who gets in when the provider is
    down), ``off`` for nobody. Permissions of local users and groups stay Django's — but a user
    whose role bindings scope it gets its rights from them alone."""

    def authenticate(
        self,
        request: HttpRequest | None,
        username: str | None = None,
        password: str | None = None,
        **kwargs: Any,
    ) -> AbstractBaseUser | None:
        mode = settings.LOCAL_LOGIN
        if mode == "off" or username is None or password is None:
            return None
        user = super().authenticate(request, username=username, password=password, **kwargs)
        if user is None:
            return None
        if mode == "break-glass" and not user.is_superuser:
            return None
        return user

    def get_all_permissions(self, user_obj: Any, obj: Any = None) -> set[str]:
        if is_scoped(user_obj):
            return set()
        return super().get_all_permissions(user_obj, obj)

    def has_module_perms(self, user_obj: Any, app_label: str) -> bool:
        if is_scoped(user_obj):
            return False
        return super().has_module_perms(user_obj, app_label)


class OIDCBackend(OIDCAuthenticationBackend):
    """Single sign-on with the provider of ``OIDC_ISSUER``: the authorization code flow with
    PKCE (mozilla-django-oidc); the user is found by the provider's ``iss`` and ``sub`` (never by
    e-mail), made on its first login, and its groups replaced by the provider's on every login."""

    get_settings = staticmethod(oidc.setting)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # Django makes its backends anew for every login, a password's too: the provider's
        # endpoints are read only when a provider's answer is to be checked (a provider that is
        # down must not stop the break-glass login).
        self.UserModel = get_user_model()

    def authenticate(self, request: HttpRequest | None, **kwargs: Any) -> AbstractBaseUser | None:
        if not settings.OIDC_ISSUER or request is None or "nonce" not in kwargs:
            return None  # not the callback of a single sign-on
        super().__init__()
        return super().authenticate(request, **kwargs)

    def verify_claims(self, claims: dict[str, Any]) -> bool:
        return bool(claims.get("sub"))

    def get_userinfo(self, access_token: str, id_token: str, payload: dict[str, Any]) -> dict[str, Any]:
        """The verified ID token's claims, completed by the userinfo endpoint's (the ID token's
        ``sub`` wins: a userinfo answer for someone else is refused)."""
        info = super().get_userinfo(access_token, id_token, payload) if self.OIDC_OP_USER_ENDPOINT else {}
        if info.get("sub", payload.get("sub")) != payload.get("sub"):
            raise SuspiciousOperation("the userinfo answer is for another subject than the ID token")
        return {**info, **payload}

    def get_or_create_user(
        self, access_token: str, id_token: str, payload: dict[str, Any]
    ) -> AbstractBaseUser | None:
        claims = self.get_userinfo(access_token, id_token, payload)
        if not self.verify_claims(claims):
            raise SuspiciousOperation("the provider's claims have no subject")
        user = identity_login(issuer=oidc.issuer(), claims=claims, groups_claim=settings.OIDC_GROUPS_CLAIM)
        return user if user.is_active else None

    def filter_users_by_claims(self, claims: dict[str, Any]) -> Any:
        return self.UserModel.objects.filter(
            access_identity__issuer=oidc.issuer(), access_identity__subject=claims.get("sub")
        )
