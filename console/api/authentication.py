"""Module managers' credentials in the API: who they are, and what they may touch.

A request with a module credential (``kcpm_…`` key) acts as a ``ModuleManager``: a principal
with no Django permissions, which the module-scoped views (ModuleConfigs, SyncResources) let
read its module's ModuleConfigs, report their status and write its module's SyncResources.
Every other view refuses it with 403 and a reason that says what it may do instead.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework.exceptions import AuthenticationFailed, PermissionDenied
from rest_framework.request import Request

from fleet.models import MODULE_KEY_MARKER, ModuleCredential
from fleet.services.credentials import module_credential_authenticate
from kernel.api.authentication import IssuedKeyAuthentication, ScopedPrincipal
from kernel.api.permissions import StaffModelPermissions


class ModuleManager(ScopedPrincipal):
    """The principal of a module credential (``request.user``; ``request.auth`` is the credential)."""

    def __init__(self, credential: ModuleCredential) -> None:
        self.credential = credential
        self.module = credential.module
        self.username = f"module:{credential.module.name}"

    def __str__(self) -> str:
        return f"{self.username} ({self.credential.name})"

    def get_username(self) -> str:
        return self.username

    def refusal(self, request: Request) -> str:
        name = self.module.name
        return (
            f"this credential belongs to module {name}: it may only read {name}'s ModuleConfigs, report "
            f"their status and write {name}'s SyncResources, not {request.method} {request.path}"
        )


class ModuleCredentialAuthentication(IssuedKeyAuthentication):
    """Module credentials (``kcpm_…`` keys, ``Token`` or ``Bearer``)."""

    marker = MODULE_KEY_MARKER

    def identify(self, key: str) -> tuple[Any, Any]:
        credential = module_credential_authenticate(key)
        if credential is None:
            raise AuthenticationFailed("Invalid token.")
        return ModuleManager(credential), credential


def module_credential(request: Request) -> ModuleCredential | None:
    """The module credential the request authenticated with (``None``: a person or nobody)."""
    return request.auth if isinstance(request.auth, ModuleCredential) else None


def refuse_other_module(credential: ModuleCredential, what: str, module_name: str) -> None:
    """403 unless ``module_name`` is the credential's module; ``what`` names the object."""
    own = credential.module.name
    if module_name != own:
        raise PermissionDenied(f"this credential belongs to module {own}; {what} is module {module_name}")


class ModuleScopedPermissions(StaffModelPermissions):
    """People: model permissions. Module credentials: the view's ``module_actions`` only, and only
    on objects of their own module (403 naming both modules otherwise)."""

    def has_permission(self, request: Request, view: Any) -> bool:
        credential = module_credential(request)
        if credential is None:
            return super().has_permission(request, view)
        if view.action in view.module_actions:
            return True
        self.message = request.user.refusal(request)
        return False

    def has_object_permission(self, request: Request, view: Any, obj: Any) -> bool:
        credential = module_credential(request)
        if credential is None:
            return super().has_object_permission(request, view, obj)
        refuse_other_module(credential, f"{view.kind.kind} {obj.key}", obj.module.name)
        return True


class ModuleCredentialScheme(OpenApiAuthenticationExtension):
    """The OpenAPI security scheme of module credentials (``Token kcpm_…`` or ``Bearer kcpm_…``)."""

    target_class = ModuleCredentialAuthentication
    name = "moduleCredential"

    def get_security_definition(self, auto_schema: object) -> dict[str, str]:
        return {
            "type": "apiKey",
            "in": "header",
            "name": "Authorization",
            "description": "`Token <key>` or `Bearer <key>` with a module manager's credential (`kcpm_…`): "
            "its module's ModuleConfigs and SyncResources only",
        }
