"""Admin of Kymas."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import BooleanField, ExpressionWrapper, Q, QuerySet
from django.db.models.functions import Coalesce, Greatest
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html

from console.dashboard.kyma import kyma_live, kyma_page
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
    object_button,
    secret_state,
    state_badge,
)
from kernel.errors import ApplicationError
from kernel.filtersets import admin_filter

from .filters import ReasonFilter, WatcherFilter
from .widgets import ModulesField

MODULES_SHOWN = 3  # in the list; the rest as "+N" (all of them in the tooltip)
LIVE_SECONDS = 3  # how often the Kyma page asks for its live part


class KymaForm(ResourceVersionForm):
    kubeconfig_new = WriteOnlySecretField(
        label="New kubeconfig",
        help_text="Paste to replace the stored kubeconfig. The stored one is encrypted and never shown.",
    )
    kubeconfig_clear = forms.BooleanField(label="Remove the stored kubeconfig", required=False)
    modules = ModulesField()

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
        "name_column",
        "state_column",
        "reason_column",
        "modules_column",
        "channel",
        "last_change",
        "last_reconcile",
        "watcher_column",
    )
    list_display_links = ("name_column",)
    filterset_class = KymaFilterSet
    list_filter = (
        admin_filter(KymaFilterSet, "state"),
        ReasonFilter,
        WatcherFilter,
        admin_filter(KymaFilterSet, "channel"),
        admin_filter(KymaFilterSet, "namespace"),
    )
    search_fields = ("name", "runtime_id", "skr_domain")
    ordering = ("namespace", "name")
    actions = ("reconcile_now",)
    change_form_template = "admin/controlplane/kyma/edit_form.html"
    page_template = "admin/controlplane/kyma/page.html"
    live_template = "admin/controlplane/kyma/live.html"
    changelist_defer = (
        "conditions",
        "module_status",
        "last_operation",
        "labels",
        "annotations",
        "kubeconfig",
    )
    readonly_fields = ("uid", "generation", "kubeconfig_state", "deletion_timestamp", "created_at")
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
    )

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        has_kubeconfig = ExpressionWrapper(~Q(kubeconfig=""), output_field=BooleanField())
        last_change = Greatest("updated_at", Coalesce("status_changed_at", "updated_at"))
        return (
            super().get_queryset(request).annotate(has_kubeconfig=has_kubeconfig, last_change_at=last_change)
        )

    @admin.display(description="Kyma", ordering="name")
    def name_column(self, kyma: Kyma) -> str:
        return format_html(
            '<strong>{}</strong><br><span class="cp-muted cp-small">{} · {}</span>',
            kyma.name,
            kyma.namespace,
            kyma.runtime_id,
        )

    @admin.display(description="State", ordering="state")
    def state_column(self, kyma: Kyma) -> str:
        return state_badge(kyma.state)

    @admin.display(description="Reason", ordering="state_reason")
    def reason_column(self, kyma: Kyma) -> str:
        return kyma.state_reason or "—"

    @admin.display(description="Modules")
    def modules_column(self, kyma: Kyma) -> str:
        names = [m.get("name", "?") for m in kyma.modules or () if isinstance(m, dict)]
        if not names:
            return "—"
        shown = ", ".join(names[:MODULES_SHOWN])
        more = f" +{len(names) - MODULES_SHOWN}" if len(names) > MODULES_SHOWN else ""
        return format_html('<span title="{}">{}{}</span>', ", ".join(names), shown, more)

    @admin.display(description="Last change", ordering="last_change_at")
    def last_change(self, kyma: Kyma) -> str:
        return age(getattr(kyma, "last_change_at", None) or kyma.updated_at)

    @admin.display(description="Last reconcile", ordering="last_reconcile_at")
    def last_reconcile(self, kyma: Kyma) -> str:
        return age(kyma.last_reconcile_at)

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
            return format_html("{}<br>{}", state_badge("Warning", "silent"), age(seen))
        return age(seen)

    def save_model(self, request: HttpRequest, obj: Kyma, form: KymaForm, change: bool) -> None:
        kyma_services.kyma_save(kyma=obj)
        if form.cleaned_data.get("kubeconfig_new"):
            kyma_services.kyma_set_kubeconfig(kyma=obj, kubeconfig=form.cleaned_data["kubeconfig_new"])
        elif form.cleaned_data.get("kubeconfig_clear"):
            kyma_services.kyma_set_kubeconfig(kyma=obj, kubeconfig="")

    def delete_service(self, obj: Kyma) -> bool:
        return kyma_services.kyma_delete(kyma=obj)

    def render_change_form(
        self, request: HttpRequest, context: dict, add: bool = False, change: bool = False, **kwargs: Any
    ) -> Any:
        # The edit form saves or goes back to the Kyma page: no "Save and add another".
        context.update(show_save_and_add_another=False)
        if change:
            context["title"] = "Edit Kyma"
        return super().render_change_form(request, context, add=add, change=change, **kwargs)

    def changelist_view(self, request: HttpRequest, extra_context: dict | None = None) -> HttpResponse:
        return super().changelist_view(request, {"title": "Kymas", **(extra_context or {})})

    def get_urls(self) -> list:
        view = self.admin_site.admin_view
        urls = [
            path(
                "<path:object_id>/reconcile/",
                view(self.reconcile_one_view),
                name="controlplane_kyma_reconcile",
            ),
            path("<path:object_id>/edit/", view(self.edit_view), name="controlplane_kyma_edit"),
            path("<path:object_id>/live/", view(self.live_view), name="controlplane_kyma_live"),
        ]
        return urls + super().get_urls()

    def _viewable(self, request: HttpRequest, object_id: str) -> Kyma:
        kyma = self.get_object(request, unquote(object_id))
        if kyma is None:
            raise Http404(f"no Kyma with id {object_id!r}")
        if not self.has_view_or_change_permission(request, kyma):
            raise PermissionDenied
        return kyma

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict | None = None
    ) -> HttpResponse:
        """The Kyma page: a read view (status, conditions, modules, timeline, manifests). Editing
        is its own view (``edit/``); a POST here is taken as that form's, for older clients."""
        if request.method == "POST":
            return self.edit_view(request, object_id, form_url, extra_context)
        kyma = self._viewable(request, object_id)
        context = {
            **self.admin_site.each_context(request),
            "title": f"Kyma {kyma.namespace}/{kyma.name}",
            "subtitle": None,
            "opts": self.opts,
            "original": kyma,
            "kyma_page": kyma_page(kyma),
            "has_change_permission": self.has_change_permission(request, kyma),
            "has_delete_permission": self.has_delete_permission(request, kyma),
            "live_url": reverse("admin:controlplane_kyma_live", args=[kyma.pk]),
            "live_seconds": LIVE_SECONDS,
            **(extra_context or {}),
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, self.page_template, context)

    def edit_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict | None = None
    ) -> HttpResponse:
        """The edit form (the admin's change form), with the resourceVersion check."""
        return self.changeform_view(request, object_id, form_url, extra_context)

    def live_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """The live part of the Kyma page as an HTML fragment, for the page's poll (same origin,
        behind the admin's session like every admin page)."""
        if request.method != "GET":
            return HttpResponseNotAllowed(["GET"])
        kyma = self._viewable(request, object_id)
        response = TemplateResponse(request, self.live_template, {"live": kyma_live(kyma), "original": kyma})
        response["Cache-Control"] = "no-store"
        return response

    def response_change(self, request: HttpRequest, obj: Kyma) -> HttpResponse:
        """After saving: back to the Kyma page (or the form again with "Save and continue")."""
        response = super().response_change(request, obj)
        if "_continue" in request.POST or "_saveasnew" in request.POST:
            return response
        return HttpResponseRedirect(reverse("admin:controlplane_kyma_change", args=[obj.pk]))

    def response_add(
        self, request: HttpRequest, obj: Kyma, post_url_continue: str | None = None
    ) -> HttpResponse:
        response = super().response_add(request, obj, post_url_continue)
        if "_continue" in request.POST or "_addanother" in request.POST:
            return response
        return HttpResponseRedirect(reverse("admin:controlplane_kyma_change", args=[obj.pk]))

    @object_button
    def reconcile_one_view(self, request: HttpRequest, kyma: Kyma) -> HttpResponseRedirect:
        """The Kyma page's "Reconcile now" button."""
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
