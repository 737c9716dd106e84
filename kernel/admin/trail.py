"""The audit trail's own admin: every write and refused write, read-only."""

from __future__ import annotations

from django.contrib import admin
from django.utils.html import format_html_join

from kernel.models import AuditEntry

from .base import RecordAdmin, age, state_badge


@admin.register(AuditEntry)
class AuditEntryAdmin(RecordAdmin):
    """The audit trail: every write and refused write, by whom, through which door, from where."""

    list_display = (
        "at_column",
        "actor",
        "credential",
        "via",
        "source",
        "action",
        "object_column",
        "outcome_column",
    )
    list_filter = ("via", "action", "outcome", "kind")
    search_fields = ("actor", "credential", "name", "namespace", "uid", "source")
    readonly_fields = (*AuditEntry.SHOWN_FIELDS, "kyma_id", "change_lines_column")
    exclude = ("changes",)
    date_hierarchy = None

    @admin.display(description="When", ordering="at")
    def at_column(self, entry: AuditEntry) -> str:
        return age(entry.at)

    @admin.display(description="Object")
    def object_column(self, entry: AuditEntry) -> str:
        return f"{entry.kind} {entry.object_key}".strip()

    @admin.display(description="Outcome", ordering="outcome")
    def outcome_column(self, entry: AuditEntry) -> str:
        refused = entry.outcome == AuditEntry.Outcome.REFUSED
        return state_badge("Error" if refused else "Ready", entry.get_outcome_display())

    @admin.display(description="Changes")
    def change_lines_column(self, entry: AuditEntry) -> str:
        return format_html_join("", "<div>{}</div>", ((line,) for line in entry.change_lines())) or "—"
