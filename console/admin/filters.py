"""List filters the fleet dashboard links to: each uses the dashboard's own selector, so the
number on the dashboard and the length of the list agree."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from fleet.filtersets import KymaFilterSet
from fleet.models import Kyma, KymaState
from fleet.selectors import watcher_silent_after


class WatcherFilter(admin.SimpleListFilter):
    """Kymas by the liveness of their runtime watcher (``?watcher=silent|seen|never``)."""

    title = "runtime watcher"
    parameter_name = "watcher"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        seconds = int(watcher_silent_after().total_seconds())
        if not seconds:  # the detection is off
            return [("seen", "heard at least once"), ("never", "never heard (has a kubeconfig)")]
        return [
            ("seen", f"heard within {seconds} s"),
            ("silent", f"silent for more than {seconds} s"),
            ("never", "never heard (has a kubeconfig)"),
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        """Through the API's FilterSet (``?watcher=`` there too); the titles above say the window."""
        if self.value() is None:
            return queryset
        found = KymaFilterSet({"watcher": self.value()}, queryset=queryset)
        return found.qs if found.is_valid() else queryset.none()


class RecordStateFilter(admin.SimpleListFilter):
    """The state a reconcile left, from the fixed list of states (no scan of the records)."""

    title = "resulting state"
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(state, label) for state, label in KymaState.choices if state]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        if self.value():
            return queryset.filter(state=self.value())
        return queryset


class ReasonFilter(admin.SimpleListFilter):
    """Kymas by why they are in their state (``?reason=Unreachable``): the dashboard's groups of
    failing runtimes link here with ``state`` too."""

    title = "state reason"
    parameter_name = "reason"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        reasons = (
            Kyma.objects.exclude(state_reason="")
            .order_by("state_reason")
            .values_list("state_reason", flat=True)
        )
        return [(reason, reason) for reason in reasons.distinct()[:50]]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        if self.value():
            return queryset.filter(state_reason=self.value())
        return queryset
