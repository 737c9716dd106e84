"""Admin of Watchers."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.core.exceptions import ValidationError
from django.http import HttpRequest

from kernel.admin import ResourceAdmin, ResourceVersionForm, age, state_badge
from kernel.filtersets import admin_filter

from .filtersets import WatcherFilterSet
from .models import Watcher
from .services import watcher_delete, watcher_save


class WatcherForm(ResourceVersionForm):
    class Meta:
        model = Watcher
        fields = (
            "namespace",
            "name",
            "manager",
            "labels_to_watch",
            "resource_to_watch",
            "field",
            "service_info",
            "gateway",
            "labels",
            "annotations",
        )

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if self.instance.pk and self.instance.is_deleting:
            raise ValidationError("This Watcher is being deleted; it cannot be changed.")
        return data


@admin.register(Watcher)
class WatcherAdmin(ResourceAdmin):
    form = WatcherForm
    list_display = ("name", "namespace", "component", "watched", "field", "state_column", "age_column")
    filterset_class = WatcherFilterSet
    list_filter = (admin_filter(WatcherFilterSet, "state"), "field")
    search_fields = WatcherFilterSet.search_fields
    readonly_fields = (
        "component",
        "uid",
        "generation",
        "state_column",
        "conditions",
        "observed_generation",
        "deletion_timestamp",
        "created_at",
    )

    @admin.display(description="Watches")
    def watched(self, watcher: Watcher) -> str:
        r = watcher.resource_to_watch or {}
        return f"{r.get('resource')}.{r.get('group') or 'core'}/{r.get('version')}"

    @admin.display(description="State", ordering="state")
    def state_column(self, watcher: Watcher) -> str:
        return state_badge(watcher.state)

    @admin.display(description="Age", ordering="created_at")
    def age_column(self, watcher: Watcher) -> str:
        return age(watcher.created_at)

    def save_model(self, request: HttpRequest, obj: Watcher, form: WatcherForm, change: bool) -> None:
        watcher_save(obj)

    def delete_service(self, obj: Watcher) -> bool:
        return watcher_delete(watcher=obj)
