"""The admin of every model that belongs to a Kyma, scoped: lists, pages, actions, edits.

:func:`scope_admin_site` runs once the admins are registered (``AccessConfig.ready``) and puts
:class:`ScopedAdminMixin` in front of the admin of every model :data:`access.scope.SCOPED`
declares, wherever that admin is defined: a scoped user's lists and pages hold only the rows of
Kymas it may see (another Kyma's page is a 404, as if it did not exist), its edits, deletes and
actions reach only Kymas it may change, and a Kyma it creates or edits must stay inside."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import Model, QuerySet
from django.http import HttpRequest

from .roles import CHANGE, VIEW
from .scope import covers, declared_path, require_labels, scoped


def _is_action_post(request: HttpRequest) -> bool:
    match = getattr(request, "resolver_match", None)
    return request.method == "POST" and match is not None and str(match.url_name).endswith("_changelist")


class ScopedAdminMixin:
    """Rows of Kymas outside the user's scope are not there; writes need the change scope."""

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        queryset = super().get_queryset(request)  # type: ignore[misc]
        return scoped(request.user, queryset, CHANGE if _is_action_post(request) else VIEW)

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        allowed = super().has_change_permission(request, obj)  # type: ignore[misc]
        return allowed and (obj is None or covers(request.user, obj, CHANGE))

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        allowed = super().has_delete_permission(request, obj)  # type: ignore[misc]
        return allowed and (obj is None or covers(request.user, obj, CHANGE))

    def save_model(self, request: HttpRequest, obj: Model, form: Any, change: bool) -> None:
        if declared_path(type(obj)) == "":  # the Kyma itself: its labels decide where it is
            require_labels(request.user, getattr(obj, "labels", {}), CHANGE, what=f"Kyma {obj}")
        super().save_model(request, obj, form, change)  # type: ignore[misc]


def scope_admin_site(site: admin.AdminSite) -> list[type[Model]]:
    """Scope the admins of every declared model on ``site``; returns the models scoped."""
    done = []
    for model, model_admin in list(site._registry.items()):
        if declared_path(model) is None or isinstance(model_admin, ScopedAdminMixin):
            continue
        cls = type(model_admin)
        scoped_cls = type(cls.__name__, (ScopedAdminMixin, cls), {"__module__": cls.__module__})
        site._registry[model] = scoped_cls(model, site)
        done.append(model)
    return done
