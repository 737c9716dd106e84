"""Admin of the module catalog, module configs and sync resources."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponseRedirect
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join

from fleet.filtersets import ModuleConfigFilterSet, ModuleFilterSet, SyncResourceFilterSet
from fleet.models import Module, ModuleConfig, ModuleCredential, SyncResource
from fleet.services import credentials as credential_services
from fleet.services import modules as module_services
from kernel.admin import (
    AuditHistoryMixin,
    RefusalsShownMixin,
    ResourceAdmin,
    ResourceVersionForm,
    WriteOnlySecretField,
    age,
    object_button,
    secret_state,
    state_badge,
)
from kernel.filtersets import admin_filter

from .module_page import known_cluster_kinds, module_page


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
    change_form_template = "admin/controlplane/module/change_form.html"

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
        module_services.module_save(module=obj)

    def delete_service(self, obj: Module) -> bool:
        module_services.module_delete(module=obj)
        return True

    def render_change_form(
        self, request: HttpRequest, context: dict, add: bool = False, change: bool = False, **kwargs: Any
    ) -> Any:
        module = context.get("original")
        if module is not None and module.pk:
            context["module_page"] = module_page(module)
            context["known_cluster_kinds"] = known_cluster_kinds()
            context["may_manage_credentials"] = request.user.has_perm("controlplane.add_modulecredential")
            context["may_revoke_credentials"] = request.user.has_perm("controlplane.change_modulecredential")
        return super().render_change_form(request, context, add=add, change=change, **kwargs)


@admin.register(ModuleCredential)
class ModuleCredentialAdmin(RefusalsShownMixin, AuditHistoryMixin, admin.ModelAdmin):
    """A module manager's credentials: the key is shown once, on the page after adding; revoking
    keeps the row (and says when), so the record of who could act for the module stays. Every
    write (add, edit of name or expiry, revoke, delete) is a service's, in the audit trail."""

    list_display = (
        "name",
        "module",
        "key_prefix",
        "state_column",
        "created_at",
        "expires_at",
        "last_used_at",
    )
    list_filter = ("module",)
    list_select_related = ("module",)
    search_fields = ("name", "prefix", "module__name")
    readonly_fields = ("key_prefix", "state_column", "created_by", "created_at", "last_used_at", "revoked_at")
    actions = ("revoke",)
    change_form_template = "admin/controlplane/modulecredential/change_form.html"
    show_full_result_count = False

    @admin.display(description="key", ordering="prefix")
    def key_prefix(self, obj: ModuleCredential) -> str:
        return f"{obj.prefix}…" if obj.prefix else "—"

    @admin.display(description="State")
    def state_column(self, obj: ModuleCredential) -> str:
        state = obj.key_state
        return state_badge({"Active": "Ready", "Expired": "Warning", "Revoked": "Error"}[state], state)

    def get_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        if obj is None:
            return ["module", "name", "expires_at"]
        return ["module", "name", "key_prefix", "state_column", "expires_at", *self.readonly_fields[2:]]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> tuple[str, ...]:
        # A credential keeps its module: moving it would let a key act for a module it was not made for.
        return (*self.readonly_fields, "module") if obj is not None else self.readonly_fields

    def save_model(
        self, request: HttpRequest, obj: ModuleCredential, form: forms.ModelForm, change: bool
    ) -> None:
        if change:
            credential_services.module_credential_save(credential=obj)
            return
        obj.created_by = request.user
        key = credential_services.module_credential_issue(obj)  # the form checked the same rules
        messages.success(
            request,
            format_html(
                "The key of module {}'s credential “{}”: <code>{}</code> — copy it now; it is not shown "
                "again.",
                obj.module.name,
                obj.name,
                key,
            ),
        )

    def delete_model(self, request: HttpRequest, obj: ModuleCredential) -> None:
        credential_services.module_credential_delete(credential=obj)

    def delete_queryset(self, request: HttpRequest, queryset: Any) -> None:
        for credential in queryset:
            credential_services.module_credential_delete(credential=credential)

    @admin.action(description="Revoke selected credentials", permissions=["change"])
    def revoke(self, request: HttpRequest, queryset: Any) -> None:
        done = sum(credential_services.module_credential_revoke(credential=c) for c in queryset)
        messages.success(request, f"Revoked {done} credential(s); their keys answer 401 from now on.")

    def get_urls(self) -> list:
        urls = [
            path(
                "<path:object_id>/revoke/",
                self.admin_site.admin_view(self.revoke_one_view),
                name="controlplane_modulecredential_revoke",
            )
        ]
        return urls + super().get_urls()

    @object_button
    def revoke_one_view(self, request: HttpRequest, credential: ModuleCredential) -> HttpResponseRedirect:
        """The Revoke buttons of the credential's and the module's pages."""
        if credential_services.module_credential_revoke(credential=credential):
            messages.success(request, f"Revoked {credential}; its key answers 401 from now on.")
        back = request.POST.get("next") or ""
        if back != "module":
            return HttpResponseRedirect(
                reverse("admin:controlplane_modulecredential_change", args=[credential.pk])
            )
        return HttpResponseRedirect(reverse("admin:controlplane_module_change", args=[credential.module_id]))


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
        module_services.moduleconfig_delete(config=obj)
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
