"""Named API tokens in the admin: made (key shown once), edited, revoked and deleted through the
services of :mod:`kernel.api_tokens`, so each write is in the audit trail and the token's History."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html
from rest_framework.authtoken import admin as authtoken_admin

from kernel.api_tokens import api_token_delete, api_token_issue, api_token_save, key_revoke
from kernel.models import ApiToken

from .base import AuditHistoryMixin, RefusalsShownMixin

# DRF's token admin lists keys in clear; named API tokens (below) replace it. Its tokens keep
# working, and can still be revoked by deleting the user or from the shell.
if admin.site.is_registered(authtoken_admin.TokenProxy):
    admin.site.unregister(authtoken_admin.TokenProxy)


@admin.register(ApiToken)
class ApiTokenAdmin(RefusalsShownMixin, AuditHistoryMixin, admin.ModelAdmin):
    """Tokens by name, owner and prefix; the key is shown once, on the page after adding."""

    list_display = ("name", "user", "key_prefix", "key_state", "created_at", "expires_at", "last_used_at")
    list_filter = ("user",)
    search_fields = ("name", "prefix", "user__username")
    readonly_fields = ("key_prefix", "key_state", "created_at", "last_used_at", "revoked_at")
    actions = ("revoke",)
    show_full_result_count = False

    @admin.action(description="Revoke selected tokens", permissions=["change"])
    def revoke(self, request: HttpRequest, queryset: QuerySet) -> None:
        done = sum(key_revoke(token) for token in queryset)
        messages.success(request, f"Revoked {done} token(s); their keys answer 401 from now on.")

    @admin.display(description="key", ordering="prefix")
    def key_prefix(self, obj: ApiToken) -> str:
        return f"{obj.prefix}…" if obj.prefix else "—"

    def get_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        if obj is None:
            return ["user", "name", "expires_at"]
        return [
            "user",
            "name",
            "key_prefix",
            "key_state",
            "created_at",
            "expires_at",
            "last_used_at",
            "revoked_at",
        ]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> tuple[str, ...]:
        # A token keeps its owner: moving it would hand someone else a key they never saw made.
        return (*self.readonly_fields, "user") if obj is not None else self.readonly_fields

    def save_model(self, request: HttpRequest, obj: ApiToken, form: forms.ModelForm, change: bool) -> None:
        if change:
            api_token_save(token=obj)
            return
        key = api_token_issue(obj)  # the form checked the same rules (name unique per user)
        messages.success(
            request,
            format_html(
                "The key of token “{}”: <code>{}</code> — copy it now; it is not shown again.", obj.name, key
            ),
        )

    def delete_model(self, request: HttpRequest, obj: ApiToken) -> None:
        api_token_delete(token=obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet) -> None:
        for token in queryset:
            api_token_delete(token=token)
