"""Role bindings and identities in the admin; every write in the audit trail."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from kernel.admin import ResourceAdmin, ResourceVersionForm
from kernel.documents.selectors import describe

from .models import FleetRoleBinding, Identity
from .roles import DESCRIPTIONS
from .services import binding_delete, binding_save


class FleetRoleBindingForm(ResourceVersionForm):
    class Meta:
        model = FleetRoleBinding
        fields = ("name", "role", "groups", "users", "selector", "description", "labels", "annotations")
        help_texts = {
            "groups": 'Identity-provider groups, as a JSON list: ["sre", "support"].',
            "users": 'User names (local users, service accounts), as a JSON list: ["sa-ci"].',
            "selector": 'A label selector over Kyma labels, e.g. {"matchLabels": '
            '{"kyma-project.io/region": "eu-west-1"}}; empty: every Kyma.',
            "role": "; ".join(f"{role}: {text}" for role, text in DESCRIPTIONS.items()),
        }


@admin.register(FleetRoleBinding)
class FleetRoleBindingAdmin(ResourceAdmin):
    form = FleetRoleBindingForm
    list_display = ("name", "role", "groups_column", "users_column", "scope_column", "updated_at")
    list_filter = ("role",)
    search_fields = ("name", "description")
    readonly_fields = ("uid", "created_at")

    @admin.display(description="Groups")
    def groups_column(self, binding: FleetRoleBinding) -> str:
        return ", ".join(binding.groups) or "—"

    @admin.display(description="Users")
    def users_column(self, binding: FleetRoleBinding) -> str:
        return ", ".join(binding.users) or "—"

    @admin.display(description="Scope")
    def scope_column(self, binding: FleetRoleBinding) -> str:
        return describe(binding.selector) or "every runtime"

    def save_model(self, request: HttpRequest, obj: FleetRoleBinding, form: Any, change: bool) -> None:
        binding_save(obj)

    def delete_service(self, obj: FleetRoleBinding) -> bool:
        return binding_delete(obj)


@admin.register(Identity)
class IdentityAdmin(admin.ModelAdmin):
    """Where each account comes from and the provider's groups at its last login (read-only:
    the provider says them)."""

    list_display = ("user", "origin", "groups_column", "groups_at")
    list_filter = ("origin",)
    search_fields = ("user__username", "subject")
    readonly_fields = ("user", "origin", "issuer", "subject", "groups", "groups_at", "description")

    @admin.display(description="Groups")
    def groups_column(self, identity: Identity) -> str:
        return ", ".join(identity.groups or ()) or "—"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False
