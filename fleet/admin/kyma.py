"""Admin of Kymas."""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import BooleanField, ExpressionWrapper, Q, QuerySet
from django.http import Http404, HttpRequest, HttpResponseNotAllowed, HttpResponseRedirect
from django.urls import path, reverse
from django.utils import timezone

from fleet.dashboard.kyma import kyma_page
from fleet.filtersets import KymaFilterSet
from fleet.jobs import services as job_services
from fleet.k8s.kubeconfig import parse_kubeconfig
from fleet.models import Kyma
from fleet.selectors import watcher_silent_after
from fleet.services import kymas as kyma_services
from kernel.admin import (
    ResourceAdmin,
    ResourceVersionForm,
    WriteOnlySecretField,
    age,
    secret_state,
    state_badge,
)
from kernel.errors import ApplicationError
from kernel.filtersets import admin_filter

from .filters import WatcherFilter

# Above this many selected Kymas, "Reconcile now" runs as a job with a progress page.


class KymaForm(ResourceVersionForm):
    kubeconfig_new = WriteOnlySecretField(
        label="New kubeconfig",
        help_text="Paste to replace the stored kubeconfig. The stored one is encrypted and never shown.",
    )
    kubeconfig_clear = forms.BooleanField(label="Remove the stored kubeconfig", required=False)

    class Meta:
        model = Kyma
        fields = (
            "namespace",
            "name",
            "runtime_id",
            "skr_domain",
            "channel",
            "modules",
            "skip_maintenance_windows",
            "labels",
            "annotations",
        )

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if self.instance.pk and self.instance.is_deleting:
            raise ValidationError("This Kyma is being deleted; it cannot be changed.")
        if data.get("kubeconfig_new") and data.get("kubeconfig_clear"):
            raise ValidationError("Either paste a new kubeconfig or remove the stored one, not both.")
        if data.get("kubeconfig_new"):
            try:
                parse_kubeconfig(data["kubeconfig_new"])
            except ApplicationError as exc:
                reasons = [f"{field}: {reason}" for field, reason in exc.errors] or [exc.message]
                self.add_error("kubeconfig_new", reasons)
        return data


@admin.register(Kyma)
class KymaAdmin(ResourceAdmin):
    form = KymaForm
    list_display = (
        "name",
        "namespace",
        "state_column",
        "channel",
        "runtime_id",
        "last_reconcile",
        "watcher_column",
        "age_column",
    )
    filterset_class = KymaFilterSet
    list_filter = (
        admin_filter(KymaFilterSet, "state"),
        WatcherFilter,
        admin_filter(KymaFilterSet, "channel"),
        admin_filter(KymaFilterSet, "namespace"),
    )
    search_fields = ("name", "runtime_id", "skr_domain")
    ordering = ("namespace", "name")
    actions = ("reconcile_now",)
    change_form_template = "admin/controlplane/kyma/change_form.html"
    save_on_top = True
    changelist_defer = (
        "modules",
        "conditions",
        "module_status",
        "last_operation",
        "labels",
        "annotations",
        "kubeconfig",
    )
    readonly_fields = (
        "uid",
        "generation",
        "kubeconfig_state",
        "state_column",
        "last_operation_text",
        "observed_generation",
        "last_reconcile_at",
        "next_reconcile_at",
        "error_streak",
        "watcher_column",
        "deletion_timestamp",
        "created_at",
    )
    fieldsets = (
        (None, {"fields": ("namespace", "name", "runtime_id", "skr_domain", "channel")}),
        ("Modules", {"fields": ("modules", "skip_maintenance_windows")}),
        ("Access", {"fields": ("kubeconfig_state", "kubeconfig_new", "kubeconfig_clear")}),
        (
            "Metadata",
            {
                "fields": ("labels", "annotations", "uid", "generation", "created_at", "deletion_timestamp"),
                "classes": ("collapse",),
            },
        ),
        (
            "Status",
            {
                "fields": (
                    "state_column",
                    "last_operation_text",
                    "observed_generation",
                    "last_reconcile_at",
                    "next_reconcile_at",
                    "error_streak",
                    "watcher_column",
                )
            },
        ),
    )

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        has_kubeconfig = ExpressionWrapper(~Q(kubeconfig=""), output_field=BooleanField())
        return super().get_queryset(request).annotate(has_kubeconfig=has_kubeconfig)

    @admin.display(description="State", ordering="state")
    def state_column(self, kyma: Kyma) -> str:
        return state_badge(kyma.state)

    @admin.display(description="Last reconcile", ordering="last_reconcile_at")
    def last_reconcile(self, kyma: Kyma) -> str:
        return age(kyma.last_reconcile_at)

    @admin.display(description="Age", ordering="created_at")
    def age_column(self, kyma: Kyma) -> str:
        return age(kyma.created_at).removesuffix(" ago")

    @admin.display(description="Kubeconfig")
    def kubeconfig_state(self, kyma: Kyma) -> str:
        return secret_state(kyma.kubeconfig)

    @admin.display(description="Runtime watcher", ordering="watcher_last_seen_at")
    def watcher_column(self, kyma: Kyma) -> str:
        seen = kyma.watcher_last_seen_at
        if seen is None:
            has_kubeconfig = getattr(kyma, "has_kubeconfig", None)  # annotated: the column is deferred
            if has_kubeconfig is None:
                has_kubeconfig = bool(kyma.kubeconfig)
            return state_badge("Warning", "never heard") if has_kubeconfig else "—"
        window = watcher_silent_after()
        if window and seen < timezone.now() - window:
            return state_badge("Warning", f"silent, {age(seen)}")
        return age(seen)

    @admin.display(description="Last operation")
    def last_operation_text(self, kyma: Kyma) -> str:
        return json.dumps(kyma.last_operation) if kyma.last_operation else "—"

    def save_model(self, request: HttpRequest, obj: Kyma, form: KymaForm, change: bool) -> None:
        kyma_services.kyma_save(obj)
        if form.cleaned_data.get("kubeconfig_new"):
            kyma_services.kyma_set_kubeconfig(kyma=obj, kubeconfig=form.cleaned_data["kubeconfig_new"])
        elif form.cleaned_data.get("kubeconfig_clear"):
            kyma_services.kyma_set_kubeconfig(kyma=obj, kubeconfig="")

    def delete_service(self, obj: Kyma) -> bool:
        return kyma_services.kyma_delete(kyma=obj)

    def render_change_form(
        self, request: HttpRequest, context: dict, add: bool = False, change: bool = False, **kwargs: Any
    ) -> Any:
        kyma = context.get("original")
        if kyma is not None and kyma.pk:
            context["kyma_page"] = kyma_page(kyma)
        return super().render_change_form(request, context, add=add, change=change, **kwargs)

    def get_urls(self) -> list:
        urls = [
            path(
                "<path:object_id>/reconcile/",
                self.admin_site.admin_view(self.reconcile_one_view),
                name="controlplane_kyma_reconcile",
            )
        ]
        return urls + super().get_urls()

    def reconcile_one_view(self, request: HttpRequest, object_id: str) -> HttpResponseRedirect:
        """The Kyma page's "Reconcile now" button (POST only; needs the change permission)."""
        kyma = self.get_object(request, object_id)
        if kyma is None:
            raise Http404(f"no Kyma with id {object_id!r}")
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not self.has_change_permission(request, kyma):
            raise PermissionDenied
        self.reconcile_now(request, Kyma.objects.filter(pk=kyma.pk))
        return HttpResponseRedirect(reverse("admin:controlplane_kyma_change", args=[kyma.pk]))

    @admin.action(description="Reconcile now", permissions=["change"])
    def reconcile_now(self, request: HttpRequest, queryset: QuerySet) -> HttpResponseRedirect | None:
        """Small selections are queued at once; large ones become a job with a progress page."""
        ids = list(queryset.values_list("pk", flat=True))
        try:
            done = job_services.kymas_reconcile_now(kyma_ids=ids, user=request.user)
        except ApplicationError as exc:
            messages.error(request, exc.message)
            return None
        if done.job is not None:
            messages.info(request, f"Reconciling {len(ids)} Kymas in the background (job {done.job.pk}).")
            return HttpResponseRedirect(reverse("admin:controlplane_job_change", args=[done.job.pk]))
        note = f" ({done.covered} already had one queued)" if done.covered else ""
        messages.success(request, f"Reconcile queued for {len(done.queued)} Kyma(s){note}.")
        return None
