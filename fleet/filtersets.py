"""Filters shared by the API and the admin (one definition of what can be searched)."""

from __future__ import annotations

import django_filters
from django.db.models import QuerySet
from django.utils import timezone

from fleet.models import (
    Kyma,
    KymaState,
    Module,
    ModuleConfig,
    Rollout,
    RolloutKind,
    RolloutState,
    SyncResource,
)
from fleet.selectors import watcher_q
from kernel.filtersets import SearchFilterSet, StateFilter


class KymaFilterSet(SearchFilterSet):
    search_fields = ("name", "runtime_id", "skr_domain")
    state = StateFilter(choices=KymaState.choices)
    watcher = django_filters.ChoiceFilter(
        choices=[("seen", "heard lately"), ("silent", "fell silent"), ("never", "never heard")],
        method="watcher_liveness",
        label="runtime watcher",
    )
    ordering = django_filters.OrderingFilter(
        fields=(
            "name",
            "namespace",
            "state",
            "created_at",
            ("reconcile_state__last_reconcile_at", "last_reconcile_at"),
        )
    )

    def watcher_liveness(self, queryset: QuerySet, name: str, value: str) -> QuerySet:
        return queryset.filter(watcher_q(value, timezone.now()))

    class Meta:
        model = Kyma
        fields = ("namespace", "name", "runtime_id", "skr_domain", "channel", "state")


class ModuleFilterSet(SearchFilterSet):
    search_fields = ("name", "manager", "cr_kind")

    class Meta:
        model = Module
        fields = ("name", "manager")


class ModuleConfigFilterSet(SearchFilterSet):
    search_fields = ("name", "kyma__name", "kyma__runtime_id")
    since_revision = django_filters.NumberFilter(
        field_name="revision", lookup_expr="gt", label="Revision greater than"
    )
    kyma = django_filters.CharFilter(field_name="kyma__name")
    runtime_id = django_filters.CharFilter(field_name="kyma__runtime_id")
    module = django_filters.CharFilter(field_name="module__name")

    class Meta:
        model = ModuleConfig
        fields = ("namespace", "name")


class SyncResourceFilterSet(SearchFilterSet):
    search_fields = ("name", "kyma__name", "kyma__runtime_id")
    kyma = django_filters.CharFilter(field_name="kyma__name")
    module = django_filters.CharFilter(field_name="module__name")

    class Meta:
        model = SyncResource
        fields = ("namespace", "name")


class RolloutFilterSet(SearchFilterSet):
    search_fields = ("name", "subject")
    state = django_filters.MultipleChoiceFilter(choices=RolloutState.choices)
    kind = django_filters.ChoiceFilter(choices=RolloutKind.choices)
    ordering = django_filters.OrderingFilter(fields=("name", "state", "created_at"))

    class Meta:
        model = Rollout
        fields = ("name", "kind", "subject", "state")
