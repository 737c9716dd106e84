"""Read-only API of the WatchEvents the listener recorded (``/api/v1/events/``), newest first.

The records carry what the runtime watcher sent and what the listener did with it; the Kyma is
shown by namespace, name and runtime id only (its kubeconfig is never even loaded).
"""

from __future__ import annotations

import django_filters
from django.db.models import Q, QuerySet
from rest_framework import serializers, viewsets

from kernel.filtersets import RFC3339Filter

from .models import WatchEventRecord


class WatchEventFilterSet(django_filters.FilterSet):
    kyma = django_filters.CharFilter(method="filter_kyma", label="Kyma name, NAMESPACE/NAME, or runtime id")
    component = django_filters.CharFilter(field_name="component", label="component (Watcher manager)")
    since = RFC3339Filter(
        field_name="received_at", lookup_expr="gte", label="received at or after (RFC 3339 timestamp)"
    )

    class Meta:
        model = WatchEventRecord
        fields = ("kyma", "component", "since")

    def filter_kyma(self, queryset: QuerySet, name: str, value: str) -> QuerySet:
        namespace, slash, kyma_name = value.partition("/")
        if slash:
            return queryset.filter(kyma__namespace=namespace, kyma__name=kyma_name)
        return queryset.filter(Q(kyma__name=value) | Q(kyma__runtime_id=value))


class KymaReferenceSerializer(serializers.Serializer):
    namespace = serializers.CharField()
    name = serializers.CharField()
    runtime_id = serializers.CharField()


class WatchedSerializer(serializers.Serializer):
    namespace = serializers.CharField(source="watched_namespace")
    name = serializers.CharField(source="watched_name")


class WatchedGvkSerializer(serializers.Serializer):
    group = serializers.CharField(source="gvk_group")
    version = serializers.CharField(source="gvk_version")
    kind = serializers.CharField(source="gvk_kind")


class WatchEventSerializer(serializers.ModelSerializer):
    kyma = KymaReferenceSerializer(read_only=True)
    watched = WatchedSerializer(source="*", read_only=True)
    watched_gvk = WatchedGvkSerializer(source="*", read_only=True)

    class Meta:
        model = WatchEventRecord
        fields = (
            "id",
            "received_at",
            "kyma",
            "component",
            "contract",
            "watched",
            "watched_gvk",
            "outcome",
            "count",
        )


class WatchEventViewSet(viewsets.ReadOnlyModelViewSet):
    """WatchEvents the listener accepted, newest first (identical ones of a moment share a row:
    ``count``). Kept per Kyma up to ``LISTENER_EVENTS_KEPT``."""

    serializer_class = WatchEventSerializer
    filterset_class = WatchEventFilterSet
    queryset = (
        WatchEventRecord.objects.select_related("kyma")
        .only(
            *(f.name for f in WatchEventRecord._meta.concrete_fields),
            "kyma__namespace",
            "kyma__name",
            "kyma__runtime_id",
        )
        .order_by("-received_at", "-id")
    )
