"""The read-only list of reconciles the control plane recorded (watch events: ``listener.admin``).

They are what the dashboard's per-minute figures count; the dashboard links here with the time
bounds of a minute or of the whole window (``?received_at__gte=...&received_at__lt=...``).
"""

from __future__ import annotations

from django.contrib import admin

from fleet.models import ReconcileRecord
from kernel.admin import RecordAdmin, admin_link, state_badge

from .filters import RecordStateFilter


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
