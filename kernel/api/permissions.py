"""API permissions: model permissions for every method, reads included."""

from typing import Any

from rest_framework.permissions import DjangoModelPermissions
from rest_framework.request import Request

from kernel.api.authentication import ScopedPrincipal


class StaffModelPermissions(DjangoModelPermissions):
    """Authenticated users with the model's view/add/change/delete permission (superusers: all).

    A scoped principal (a module manager's credential) has no model permissions; it is refused
    with its own reason, which says what it may do instead."""

    perms_map = {
        **DjangoModelPermissions.perms_map,
        "GET": ["%(app_label)s.view_%(model_name)s"],
        "HEAD": ["%(app_label)s.view_%(model_name)s"],
        "OPTIONS": ["%(app_label)s.view_%(model_name)s"],
    }

    def has_permission(self, request: Request, view: Any) -> bool:
        if isinstance(request.user, ScopedPrincipal):
            self.message = request.user.refusal(request)
            return False
        return super().has_permission(request, view)
