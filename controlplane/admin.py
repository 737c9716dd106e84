"""Framework internals in the admin: Celery beat's tables, and the admin's own branding.

``django_celery_beat`` stores the schedule beat runs; ours comes from ``CELERY_BEAT_SCHEDULE``
(settings, from the environment) and is written into those tables at every beat start. Editing
them in the admin would be undone at the next start, or worse, would silently stop reconciles
until then; so the schedule tables are hidden and the periodic tasks are listed read-only, saying
where each is set.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib import admin
from django.http import HttpRequest
from django_celery_beat import models as beat

admin.site.site_header = "Kyma fleet control plane"
admin.site.site_title = "Kyma fleet control plane"
admin.site.index_title = "Fleet administration"

for model in (
    beat.IntervalSchedule,
    beat.CrontabSchedule,
    beat.SolarSchedule,
    beat.ClockedSchedule,
    beat.PeriodicTask,
):
    if admin.site.is_registered(model):
        admin.site.unregister(model)


@admin.register(beat.PeriodicTask)
class PeriodicTaskAdmin(admin.ModelAdmin):
    """Beat's periodic tasks, to look at: the code owns them (``CELERY_BEAT_SCHEDULE``)."""

    list_display = ("name", "task", "schedule_column", "owner", "enabled", "last_run_at", "total_run_count")
    fields = (
        "name",
        "task",
        "schedule_column",
        "owner",
        "enabled",
        "last_run_at",
        "total_run_count",
        "expires",
    )
    readonly_fields = fields
    ordering = ("name",)
    actions = None

    @admin.display(description="schedule")
    def schedule_column(self, task: beat.PeriodicTask) -> str:
        return (
            str(task.schedule)
            if task.interval_id or task.crontab_id or task.solar_id or task.clocked_id
            else "—"
        )

    @admin.display(description="set by")
    def owner(self, task: beat.PeriodicTask) -> str:
        if task.name in settings.CELERY_BEAT_SCHEDULE:
            return "the code (CELERY_BEAT_SCHEDULE; see the settings reference)"
        return "beat itself" if task.name.startswith("celery.") else "unknown (not in the code's schedule)"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
