"""API permissions: model permissions for every method, reads included, and the checks other
apps register for objects and documents (the access app's scopes: the kernel knows no Kyma)."""

from collections.abc import Callable
from typing import Any

from rest_framework.permissions import DjangoModelPermissions
from rest_framework.request import Request

from kernel.api.authentication import ScopedPrincipal

# check(request, view, obj): raises (a 403 ApplicationError) when the request may not touch obj.
ObjectCheck = Callable[[Request, Any, Any], None]
# check(request, docs): raises when the request may not write these documents.
DocumentCheck = Callable[[Request, list], None]
_OBJECT_CHECKS: list[ObjectCheck] = []
_DOCUMENT_CHECKS: list[DocumentCheck] = []


def register_object_check(check: ObjectCheck) -> None:
    if check not in _OBJECT_CHECKS:
        _OBJECT_CHECKS.append(check)


def register_document_check(check: DocumentCheck) -> None:
    if check not in _DOCUMENT_CHECKS:
        _DOCUMENT_CHECKS.append(check)


def check_object(request: Request, view: Any, obj: Any) -> None:
    """Every registered check of ``obj`` (a 403 raised by the first that refuses)."""
    for check in _OBJECT_CHECKS:
        check(request, view, obj)


def check_documents(request: Request, docs: list) -> None:
    """Every registered check of documents about to be written (create, update, apply)."""
    for check in _DOCUMENT_CHECKS:
        check(request, docs)


class StaffModelPermissions(DjangoModelPermissions):
    """Authenticated users with the model's view/add/change/delete permission (superusers: all),
    and the registered object checks (the access app's scopes).

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

    def has_object_permission(self, request: Request, view: Any, obj: Any) -> bool:
        check_object(request, view, obj)
        return super().has_object_permission(request, view, obj)
