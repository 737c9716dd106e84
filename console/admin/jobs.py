"""Admin of jobs: the list, and a job page with a progress bar that follows the work."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join

from console.dashboard.display import job_outcome_text, job_status_badge
from fleet.jobs.selectors import kyma_names, reconcile_outcome
from fleet.models import Job
from kernel.admin import AuditedWritesMixin, ReadOnlyAdmin, age, when

TARGETS_SHOWN = 20
# The job page keeps refreshing this long after the queueing ended, while reconciles are pending.
FOLLOW_RECONCILES = dt.timedelta(minutes=10)


def progress_bar(job: Job, *, large: bool = False) -> str:
    """A CSS bar (no script): striped while the amount of work is not known yet."""
    percent = job.percent
    width = 100 if percent is None else percent
    text = f"{job.done} / {job.total}" if job.total else ("…" if not job.is_finished else "—")
    return format_html(
        '<span class="cp-progress{}{}" title="{}"><span style="width:{}%"></span></span> <small>{}</small>',
        " cp-progress-large" if large else "",
        " cp-progress-unknown" if percent is None and not job.is_finished else "",
        f"{percent}%" if percent is not None else "progress not known yet",
        width,
        text,
    )


@admin.register(Job)
class JobAdmin(AuditedWritesMixin, ReadOnlyAdmin):
    change_form_template = "admin/controlplane/job/change_form.html"
    list_display = ("__str__", "kind", "status_column", "progress_column", "created_by", "created", "outcome")
    list_filter = ("status", "kind")
    list_select_related = ("created_by",)
    list_per_page = 25  # each reconcile job's outcome is read from its Kymas' reconcile records
    ordering = ("-created_at", "-id")
    fields = ("kind", "created_by", "created", "started", "finished", "targets_summary", "outcome")
    readonly_fields = fields

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        queryset = super().get_queryset(request)
        match = getattr(request, "resolver_match", None)
        if match is not None and match.url_name.endswith("_changelist"):
            queryset = queryset.defer("log")  # large, and the list does not show it
        if request.user.has_perm("controlplane.view_job"):
            return queryset
        return queryset.filter(created_by=request.user)  # staff follow the jobs they started

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        if super().has_view_permission(request, obj):
            return True
        return request.user.is_staff and (obj is None or obj.created_by_id == request.user.pk)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return super().has_delete_permission(request, obj) and (obj is None or obj.is_finished)

    @admin.display(description="Status", ordering="status")
    def status_column(self, job: Job) -> str:
        return job_status_badge(job)

    @admin.display(description="Progress")
    def progress_column(self, job: Job) -> str:
        return progress_bar(job)

    @admin.display(description="Created", ordering="created_at")
    def created(self, job: Job) -> str:
        return age(job.created_at)

    @admin.display(description="Started", ordering="started_at")
    def started(self, job: Job) -> str:
        return when(job.started_at)

    @admin.display(description="Finished", ordering="finished_at")
    def finished(self, job: Job) -> str:
        return when(job.finished_at)

    @admin.display(description="Outcome")
    def outcome(self, job: Job) -> str:
        return job_outcome_text(job)

    @admin.display(description="Targets")
    def targets_summary(self, job: Job) -> str:
        """Kymas by name (linked), not database ids; other targets as "key: value"."""
        ids = job.targets.get("kyma_ids")
        if ids is None:
            return ", ".join(f"{key}: {value}" for key, value in job.targets.items()) or "—"
        names = kyma_names(ids, TARGETS_SHOWN)
        links = format_html_join(
            ", ",
            '<a href="{}">{}</a>',
            ((reverse("admin:controlplane_kyma_change", args=[pk]), name) for pk, name in names),
        )
        gone = min(len(ids), TARGETS_SHOWN) - len(names)
        more = f" and {len(ids) - TARGETS_SHOWN} more" if len(ids) > TARGETS_SHOWN else ""
        note = f" ({gone} of these no longer exist)" if gone else ""
        return format_html("{} Kyma(s): {}{}{}", len(ids), links, more, note)

    def render_change_form(
        self, request: HttpRequest, context: dict, add: bool = False, change: bool = False, **kwargs: Any
    ) -> Any:
        job = context.get("original")
        if job is not None:
            outcome = reconcile_outcome(job)
            recent = job.finished_at is not None and timezone.now() - job.finished_at < FOLLOW_RECONCILES
            waiting = outcome is not None and outcome.pending > 0 and recent
            context.update(
                job_status=job_status_badge(job),
                job_progress=progress_bar(job, large=True),
                job_outcome=outcome,
                refresh_seconds=2 if not job.is_finished or waiting else None,
            )
        return super().render_change_form(request, context, add=add, change=change, **kwargs)
