"""The read-only list of reconciles the control plane recorded (watch events: ``listener.admin``).

They are what the dashboard's per-minute figures count; the dashboard links here with the time
bounds of a minute or of the whole window (``?received_at__gte=...&received_at__lt=...``).
"""

from __future__ import annotations

from django.contrib import admin
from django.utils.html import format_html, format_html_join

from console.dashboard.display import RECORD_COLUMNS
from fleet.models import ReconcileRecord
from kernel.admin import RecordAdmin, admin_link, state_badge

from .filters import RecordStateFilter

CHANGES_SHOWN = 5  # per row of the list; the Kyma page's timeline and the record's page show all


@admin.register(ReconcileRecord)
class ReconcileRecordAdmin(RecordAdmin):
    list_display = RECORD_COLUMNS
    fields = (
        "kyma_column",
        "started_at",
        "duration_ms",
        "state_column",
        "runtime_writes",
        "why",
        "all_changes",
        "message",
    )
    readonly_fields = fields
    list_filter = (RecordStateFilter,)
    list_select_related = ("kyma",)
    search_fields = ("=kyma__name", "=kyma__runtime_id")
    ordering = ("-started_at",)

    @admin.display(description="Kyma", ordering="kyma__name")
    def kyma_column(self, record: ReconcileRecord) -> str:
        return admin_link(record.kyma)

    @admin.display(description="Why", ordering="reason")
    def why(self, record: ReconcileRecord) -> str:
        return record.reason_text

    @admin.display(description="What changed")
    def what_changed(self, record: ReconcileRecord, limit: int = CHANGES_SHOWN) -> str:
        lines = record.change_lines()
        if not lines:
            return "—"
        shown = format_html_join("", "<li>{}</li>", ((line,) for line in lines[:limit]))
        left = len(lines) - limit
        more = format_html("<li>… {} more</li>", left) if left > 0 else ""
        return format_html('<ul class="cp-changes">{}{}</ul>', shown, more)

    @admin.display(description="What changed")
    def all_changes(self, record: ReconcileRecord) -> str:
        return self.what_changed(record, limit=len(record.changes or ()) + 1)

    @admin.display(description="State", ordering="state")
    def state_column(self, record: ReconcileRecord) -> str:
        return state_badge(record.state, record.state or "—")
