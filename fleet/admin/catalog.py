"""Admin of the module catalog, module configs and sync resources."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.core.exceptions import ValidationError
from django.http import HttpRequest
from django.utils.html import format_html, format_html_join

from fleet.filtersets import ModuleConfigFilterSet, ModuleFilterSet, SyncResourceFilterSet
from fleet.models import Module, ModuleConfig, SyncResource
from fleet.services import modules as module_services
from kernel.admin import (
    ResourceAdmin,
    ResourceVersionForm,
    WriteOnlySecretField,
    age,
    secret_state,
    state_badge,
)
from kernel.filtersets import admin_filter


class ModuleForm(ResourceVersionForm):
    manager_url = forms.URLField(label="Manager URL", required=False, assume_scheme="https")
    notify_secret_new = WriteOnlySecretField(
        textarea=False,
        label="New notification key",
        help_text="HMAC key for change notifications; never shown.",
    )

    class Meta:
        model = Module
        fields = ("name", *Module.SPEC_FIELDS, "labels", "annotations")


@admin.register(Module)
class ModuleAdmin(ResourceAdmin):
    form = ModuleForm
    list_display = ("name", "channels_column", "cr_column", "manager", "age_column")
    filterset_class = ModuleFilterSet
    search_fields = ModuleFilterSet.search_fields
    readonly_fields = ("uid", "generation", "notify_secret_state", "created_at")

    @admin.display(description="Channels")
    def channels_column(self, module: Module) -> str:
        return ", ".join(f"{channel}: {version}" for channel, version in sorted(module.channels.items()))

    @admin.display(description="Module CR")
    def cr_column(self, module: Module) -> str:
        return f"{module.cr_kind} ({module.cr_api_version})"

    @admin.display(description="Age", ordering="created_at")
    def age_column(self, module: Module) -> str:
        return age(module.created_at)

    @admin.display(description="Notification key")
    def notify_secret_state(self, module: Module) -> str:
        return secret_state(module.notify_secret)

    def save_model(self, request: HttpRequest, obj: Module, form: ModuleForm, change: bool) -> None:
        if form.cleaned_data.get("notify_secret_new"):
            obj.notify_secret = form.cleaned_data["notify_secret_new"]
        module_services.module_save(obj)

    def delete_service(self, obj: Module) -> bool:
        module_services.module_delete(module=obj)
        return True


@admin.register(ModuleConfig)
class ModuleConfigAdmin(ResourceAdmin):
    list_display = ("name", "kyma", "module", "revision", "state_column", "updated_at")
    list_select_related = ("kyma", "module")
    filterset_class = ModuleConfigFilterSet
    list_filter = (admin_filter(ModuleConfigFilterSet, "module"),)
    search_fields = ModuleConfigFilterSet.search_fields
    readonly_fields = (
        "kyma",
        "module",
        "namespace",
        "name",
        "spec",
        "source_generation",
        "source_resource_version",
        "status",
        "revision",
        "uid",
        "created_at",
        "updated_at",
    )
    exclude = ("labels", "annotations")

    @admin.display(description="State")
    def state_column(self, config: ModuleConfig) -> str:
        return state_badge(config.status.get("state", ""))

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # written by the control plane from the runtime

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def delete_service(self, obj: ModuleConfig) -> bool:
        obj.delete()
        return True


class SyncResourceForm(ResourceVersionForm):
    class Meta:
        model = SyncResource
        fields = (
            "kyma",
            "module",
            "name",
            "manifests",
            "apply_strategy",
            "deletion_policy",
            "labels",
            "annotations",
        )
        widgets = {
            "manifests": forms.Textarea(attrs={"rows": 20, "style": "font-family:monospace;width:90%"})
        }

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if self.instance.pk and self.instance.is_deleting:
            raise ValidationError("This sync resource is being deleted; it cannot be changed.")
        return data


@admin.register(SyncResource)
class SyncResourceAdmin(ResourceAdmin):
    form = SyncResourceForm
    list_display = (
        "name",
        "kyma",
        "module",
        "apply_strategy",
        "deletion_policy",
        "state_column",
        "updated_at",
    )
    list_select_related = ("kyma", "module")
    filterset_class = SyncResourceFilterSet
    list_filter = ("apply_strategy", "deletion_policy", admin_filter(SyncResourceFilterSet, "module"))
    search_fields = SyncResourceFilterSet.search_fields
    raw_id_fields = ("kyma",)
    readonly_fields = (
        "namespace",
        "uid",
        "generation",
        "observed_generation",
        "status_table",
        "deletion_timestamp",
    )
    changelist_defer = ("manifests", "labels", "annotations")

    @admin.display(description="State")
    def state_column(self, resource: SyncResource) -> str:
        return state_badge(
            {"Applied": "Ready", "Failed": "Error", "Pending": "Processing"}[resource.state], resource.state
        )

    @admin.display(description="Manifests")
    def status_table(self, resource: SyncResource) -> str:
        if not resource.manifest_status:
            return "—"
        rows = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            (
                (
                    f"{m.get('kind')} {m.get('namespace', '')}/{m.get('name')}",
                    m.get("state"),
                    m.get("message", ""),
                    m.get("hash", ""),
                    m.get("lastAppliedTime", ""),
                )
                for m in resource.manifest_status
            ),
        )
        return format_html(
            "<table><thead><tr><th>Object</th><th>State</th><th>Message</th><th>Hash</th><th>Applied</th></tr>"
            "</thead><tbody>{}</tbody></table>",
            rows,
        )

    def save_model(
        self, request: HttpRequest, obj: SyncResource, form: SyncResourceForm, change: bool
    ) -> None:
        module_services.syncresource_save(obj)

    def delete_service(self, obj: SyncResource) -> bool:
        return module_services.syncresource_delete(resource=obj)
