"""Admin of rollouts (the list, and a rollout page with its waves, gate, runtimes and timeline),
the maintenance-window policy, and the runtime-watcher settings the fleet has seen.

A rollout is made by its change (or applied by hand as a document): the admin shows it and steers
it (Pause, Resume, Abort, Roll back: the same services as the API and ``manage.py rollout``).
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.db.models import Count, Q, QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html

from fleet import maintenance
from fleet.filtersets import RolloutFilterSet
from fleet.models import MaintenancePolicy, Rollout, RolloutState, RuntimeWatcherSettings, TargetState
from fleet.models.rollout import ACTIVE_STATES, RELEASED_STATES
from fleet.rollouts import selectors
from fleet.rollouts import services as rollout_services
from fleet.rollouts.kinds import subject_for
from kernel import audit
from kernel.admin import AuditedWritesMixin, AuditHistoryMixin, ReadOnlyAdmin, age, object_button, state_badge
from kernel.errors import ApplicationError
from kernel.fields import BOUNDED_JSON
from kernel.filtersets import FilterSetAdmin, admin_filter

# Rollout and runtime states as the badges' colours say them.
ROLLOUT_COLOURS = {
    RolloutState.PROGRESSING: "Processing",
    RolloutState.PAUSED: "Warning",
    RolloutState.HALTED: "Error",
    RolloutState.COMPLETED: "Ready",
    RolloutState.ABORTED: "Warning",
    RolloutState.ROLLED_BACK: "Deleting",
    RolloutState.SUPERSEDED: "Deleting",
}
TARGET_COLOURS = {
    TargetState.READY: "Ready",
    TargetState.FAILED: "Error",
    TargetState.PROGRESSING: "Processing",
    TargetState.WAITING: "Warning",
    TargetState.PENDING: "",
    TargetState.EXCLUDED: "Deleting",
    TargetState.ROLLED_BACK: "Deleting",
}
ACTIONS = {
    "pause": (rollout_services.rollout_pause, {RolloutState.PROGRESSING}),
    "resume": (rollout_services.rollout_resume, {RolloutState.PAUSED, RolloutState.HALTED}),
    "abort": (rollout_services.rollout_abort, ACTIVE_STATES),
    "rollback": (rollout_services.rollout_rollback, ACTIVE_STATES | {RolloutState.ABORTED}),
}
DONE = {"pause": "paused", "resume": "resumed", "abort": "aborted", "rollback": "rolled back"}
REFRESH_SECONDS = 5  # an active rollout's page follows it


def rollout_badge(state: str) -> str:
    return state_badge(ROLLOUT_COLOURS.get(state, ""), state)


def target_badge(state: str) -> str:
    return state_badge(TARGET_COLOURS.get(state, ""), state)


def progress(changed: int, total: int) -> str:
    percent = round(100 * changed / total) if total else 100
    return format_html(
        '<span class="cp-progress" title="{}%"><span style="width:{}%"></span></span> <small>{} / {}</small>',
        percent,
        percent,
        changed,
        total,
    )


@admin.register(Rollout)
class RolloutAdmin(AuditHistoryMixin, FilterSetAdmin):
    list_display = (
        "name",
        "kind",
        "state_column",
        "change_column",
        "wave_column",
        "progress_column",
        "created",
    )
    list_display_links = ("name",)
    filterset_class = RolloutFilterSet
    list_filter = (admin_filter(RolloutFilterSet, "state"), admin_filter(RolloutFilterSet, "kind"))
    search_fields = ("name", "subject")
    ordering = ("-created_at", "-id")
    show_full_result_count = False
    formfield_overrides = BOUNDED_JSON  # no form posts today; one added later is bounded already
    page_template = "admin/controlplane/rollout/page.html"

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        return (
            super()
            .get_queryset(request)
            .annotate(changed=Count("targets", filter=Q(targets__state__in=RELEASED_STATES)))
        )

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # made by their change, or applied by hand as a document

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # the record of what reached the fleet stays

    @admin.display(description="State", ordering="state")
    def state_column(self, rollout: Rollout) -> str:
        return rollout_badge(rollout.state)

    @admin.display(description="Change")
    def change_column(self, rollout: Rollout) -> str:
        return subject_for(rollout.kind).describe(rollout)

    @admin.display(description="Wave")
    def wave_column(self, rollout: Rollout) -> str:
        return rollout.wave_label() if rollout.is_active else "—"

    @admin.display(description="Changed")
    def progress_column(self, rollout: Rollout) -> str:
        return progress(getattr(rollout, "changed", 0), rollout.runtimes)

    @admin.display(description="Created", ordering="created_at")
    def created(self, rollout: Rollout) -> str:
        return age(rollout.created_at)

    def changelist_view(self, request: HttpRequest, extra_context: dict | None = None) -> HttpResponse:
        return super().changelist_view(request, {"title": "Rollouts", **(extra_context or {})})

    def get_urls(self) -> list:
        view = self.admin_site.admin_view
        return [
            path("<path:object_id>/do/<str:verb>/", view(self.action_view), name="controlplane_rollout_do"),
            *super().get_urls(),
        ]

    def _viewable(self, request: HttpRequest, object_id: str) -> Rollout:
        rollout = self.get_object(request, unquote(object_id))
        if rollout is None:
            raise Http404(f"no rollout with id {object_id!r}")
        if not self.has_view_or_change_permission(request, rollout):
            raise PermissionDenied
        return rollout

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict | None = None
    ) -> HttpResponse:
        """The rollout page: where it stands, wave by wave, and the operator's buttons."""
        if request.method != "GET":
            return HttpResponseNotAllowed(["GET"])
        rollout = self._viewable(request, object_id)
        may_change = self.has_change_permission(request, rollout)  # the scope covers its runtimes
        context = {
            **self.admin_site.each_context(request),
            "title": f"Rollout {rollout.name}",
            "subtitle": None,
            "opts": self.opts,
            "original": rollout,
            "page": selectors.rollout_page(rollout),
            "actions": [verb for verb, (_, allowed) in ACTIONS.items() if rollout.state in allowed]
            if may_change
            else [],
            "refresh_seconds": REFRESH_SECONDS if rollout.is_active else 0,
            "now": timezone.now(),
            **(extra_context or {}),
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, self.page_template, context)

    @object_button
    def action_view(self, request: HttpRequest, rollout: Rollout, verb: str) -> HttpResponseRedirect:
        """A button of the rollout page."""
        if verb not in ACTIONS:
            raise Http404(f"no action {verb!r}")
        try:
            rollout = ACTIONS[verb][0](rollout=rollout, user=request.user)
        except ApplicationError as exc:
            audit.record_refusal(exc, action=verb, kind="Rollout", name=rollout.name, uid=str(rollout.uid))
            messages.error(request, exc.message)
        else:
            said = rollout.message or rollout.state
            done = said if said.startswith(DONE[verb]) else f"{DONE[verb]}: {said}"
            messages.success(request, f"Rollout {rollout.name} {done}")
        return HttpResponseRedirect(reverse("admin:controlplane_rollout_change", args=[rollout.pk]))


@admin.register(MaintenancePolicy)
class MaintenancePolicyAdmin(AuditedWritesMixin, admin.ModelAdmin):
    """The fleet's maintenance-window policy (upstream's JSON shape); one row. Saved and deleted
    by the admin alone (no service: nothing else writes it), each write in the audit trail."""

    list_display = ("__str__", "updated_at")
    formfield_overrides = BOUNDED_JSON  # the policy textarea refuses what every door refuses
    readonly_fields = ("in_force",)
    fields = ("policy", "in_force")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return not MaintenancePolicy.objects.exists() and super().has_add_permission(request)

    @admin.display(description="In force")
    def in_force(self, obj: MaintenancePolicy | None = None) -> str:
        found = maintenance.policy_in_force()
        if found.policy is None:
            return found.problem
        return "this policy" if found.source == "admin" else f"the file {found.source}"


@admin.register(RuntimeWatcherSettings)
class RuntimeWatcherSettingsAdmin(ReadOnlyAdmin):
    """Every runtime-watcher image and settings the fleet has seen; the fleet's own is marked."""

    list_display = ("image", "digest_column", "is_default", "created_at")
    fields = ("digest", "settings", "is_default", "created_at")
    readonly_fields = fields

    @admin.display(description="Image")
    def image(self, obj: RuntimeWatcherSettings) -> str:
        return obj.settings.get("image", "?")

    @admin.display(description="Digest")
    def digest_column(self, obj: RuntimeWatcherSettings) -> str:
        return obj.digest[:12]
