"""Read-only lists of what the control plane recorded: watch events and reconciles.

They are what the dashboard's per-minute figures count; the dashboard links here with the time
bounds of a minute or of the whole window (``?received_at__gte=...&received_at__lt=...``).
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from controlplane.models import ReconcileRecord
from kernel.admin import ReadOnlyAdmin, admin_link, state_badge
from listener.models import WatchEventRecord

from .filters import RecordStateFilter


class RecordAdmin(ReadOnlyAdmin):
    """No actions and no deletes: housekeeping bounds these tables, people only look."""

    actions = None

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(WatchEventRecord)
class WatchEventRecordAdmin(RecordAdmin):
    list_display = ("received_at", "kyma_column", "component", "watched", "gvk", "outcome", "count")
    list_filter = ("outcome",)
    list_select_related = ("kyma",)
    search_fields = ("=kyma__name", "=kyma__runtime_id", "=component")
    ordering = ("-received_at",)

    @admin.display(description="Kyma", ordering="kyma__name")
    def kyma_column(self, event: WatchEventRecord) -> str:
        return admin_link(event.kyma)

    @admin.display(description="Object")
    def watched(self, event: WatchEventRecord) -> str:
        return "/".join(part for part in (event.watched_namespace, event.watched_name) if part)


@admin.register(ReconcileRecord)
class ReconcileRecordAdmin(RecordAdmin):
    list_display = ("started_at", "kyma_column", "state_column", "duration_ms", "runtime_writes", "message")
    list_filter = (RecordStateFilter,)
    list_select_related = ("kyma",)
    search_fields = ("=kyma__name", "=kyma__runtime_id")
    ordering = ("-started_at",)

    @admin.display(description="Kyma", ordering="kyma__name")
    def kyma_column(self, record: ReconcileRecord) -> str:
        return admin_link(record.kyma)

    @admin.display(description="State", ordering="state")
    def state_column(self, record: ReconcileRecord) -> str:
        return state_badge(record.state, record.state or "—")
