"""The read-only list of the WatchEvents the listener recorded.

The dashboard's per-minute figures count these rows and link here with the time bounds of a
minute or of the whole window (``?received_at__gte=...&received_at__lt=...``).
"""

from __future__ import annotations

from django.contrib import admin

from kernel.admin import RecordAdmin, admin_link

from .models import WatchEventRecord


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
