"""Pieces every model admin uses: state badges, ages, write-only secrets, two-step deletes."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db import models
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.timesince import timesince

from kernel.fields import BoundedJSONField
from kernel.filtersets import FilterSetAdmin

STATE_COLOURS = {
    "Ready": "#1a7f37",
    "Processing": "#0969da",
    "Warning": "#9a6700",
    "Error": "#cf222e",
    "Deleting": "#6e7781",
    "": "#6e7781",
}


def state_badge(state: str, label: str | None = None) -> str:
    colour = STATE_COLOURS.get(state, "#6e7781")
    return format_html(
        '<span class="cp-badge" style="background:{};color:#fff;border-radius:10px;padding:1px 8px;'
        'font-size:11px;font-weight:600">{}</span>',
        colour,
        label or state or "New",
    )


def age(value: Any) -> str:
    if not value:
        return "—"
    return timesince(value, timezone.now()).split(",")[0] + " ago"


def secret_state(sealed: Any) -> str:
    return "set" if sealed else "not set"


class WriteOnlySecretField(forms.CharField):
    """A secret input that never shows the stored value (it only says whether one is set)."""

    def __init__(self, *, textarea: bool = True, **kwargs: Any) -> None:
        widget = (
            forms.Textarea(attrs={"rows": 6, "autocomplete": "off", "spellcheck": "false"})
            if textarea
            else (forms.PasswordInput(render_value=False))
        )
        super().__init__(required=False, strip=False, widget=widget, **kwargs)


class ResourceAdmin(FilterSetAdmin):
    """Base admin: system fields read-only, application errors shown as messages, and deletes
    that go through the two-step service instead of removing rows under a running cleanup."""

    show_full_result_count = False
    list_per_page = 50
    formfield_overrides = {models.JSONField: {"form_class": BoundedJSONField}}
    # Columns the changelist does not show; deferred there so a page stays cheap at fleet scale.
    changelist_defer: tuple[str, ...] = ()

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        queryset = super().get_queryset(request)
        match = getattr(request, "resolver_match", None)
        if self.changelist_defer and match is not None and match.url_name.endswith("_changelist"):
            queryset = queryset.defer(*self.changelist_defer)
        return queryset

    def delete_service(self, obj: Any) -> bool:
        raise NotImplementedError

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        if not self.delete_service(obj):
            messages.info(
                request, f"{obj} is being deleted: it stays in state Deleting until its cleanup is done."
            )

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet) -> None:
        pending = sum(0 if self.delete_service(obj) else 1 for obj in queryset)
        if pending:
            messages.info(
                request, f"{pending} object(s) are being deleted and stay until their cleanup is done."
            )


class ReadOnlyAdmin(admin.ModelAdmin):
    """Records the control plane writes (events, reconciles, jobs): people look, never edit."""

    show_full_result_count = False
    list_per_page = 100

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


def admin_link(obj: Any, label: str | None = None) -> str:
    """A link to an object's admin page."""
    meta = obj._meta
    url = reverse(f"admin:{meta.app_label}_{meta.model_name}_change", args=[obj.pk])
    return format_html('<a href="{}">{}</a>', url, label if label is not None else str(obj))


class RecordAdmin(ReadOnlyAdmin):
    """No actions and no deletes: housekeeping bounds these tables, people only look."""

    actions = None

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
