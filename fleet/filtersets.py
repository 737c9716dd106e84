"""Filters shared by the API and the admin (one definition of what can be searched)."""

from __future__ import annotations

import django_filters

from fleet.models import Kyma, KymaState, Module, ModuleConfig, SyncResource
from kernel.filtersets import SearchFilterSet


class KymaFilterSet(SearchFilterSet):
    search_fields = ("name", "runtime_id", "skr_domain")
    state = django_filters.MultipleChoiceFilter(choices=KymaState.choices)
    ordering = django_filters.OrderingFilter(
        fields=("name", "namespace", "state", "created_at", "last_reconcile_at")
    )

    class Meta:
        model = Kyma
        fields = ("namespace", "name", "runtime_id", "skr_domain", "channel", "state")


class ModuleFilterSet(SearchFilterSet):
    class Meta:
        model = Module
        fields = ("name", "manager")


class ModuleConfigFilterSet(SearchFilterSet):
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
    kyma = django_filters.CharFilter(field_name="kyma__name")
    module = django_filters.CharFilter(field_name="module__name")

    class Meta:
        model = SyncResource
        fields = ("namespace", "name")
