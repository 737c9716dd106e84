"""``/api/v1/audit/``: the audit trail, read-only, newest first, with filters.

Every write through the admin, the API, commands and module credentials, and every refused one
(``kernel.audit``): who (``actor``, ``credential``), through which door (``via``), from where
(``source``), when, to which object, and what changed (secrets redacted). Filters narrow it to
an object, a Kyma (its own writes and those of its SyncResources, ModuleConfigs and kubeconfig),
an actor or a time window.
"""

from __future__ import annotations

import django_filters
from django.db.models import Q, QuerySet
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import serializers, viewsets

from fleet.models import Kyma
from kernel.api.resources import ERROR_SCHEMA
from kernel.filtersets import RFC3339Filter
from kernel.models import AuditEntry


class AuditEntryFilterSet(django_filters.FilterSet):
    kind = django_filters.CharFilter(label="object kind (Kyma, Watcher, Module, SyncResource, ...)")
    namespace = django_filters.CharFilter(label="object namespace (a key's owner for tokens and credentials)")
    name = django_filters.CharFilter(label="object name")
    uid = django_filters.CharFilter(label="object metadata.uid")
    kyma = django_filters.CharFilter(
        method="filter_kyma",
        label="Kyma NAMESPACE/NAME, name or runtime id: its writes and those of its SyncResources, "
        "ModuleConfigs and kubeconfig",
    )
    actor = django_filters.CharFilter(label="user name, or module:<name> for a module credential")
    credential = django_filters.CharFilter(
        lookup_expr="icontains", label="token or credential name (part of)"
    )
    via = django_filters.ChoiceFilter(choices=[("admin", "admin"), ("api", "api"), ("command", "command")])
    action = django_filters.CharFilter(label="create, update, delete, apply, revoke, reconcile")
    outcome = django_filters.ChoiceFilter(choices=AuditEntry.Outcome.choices)
    since = RFC3339Filter(field_name="at", lookup_expr="gte", label="at or after (RFC 3339 timestamp)")
    until = RFC3339Filter(field_name="at", lookup_expr="lt", label="before (RFC 3339 timestamp)")

    class Meta:
        model = AuditEntry
        fields = (
            "kind",
            "namespace",
            "name",
            "uid",
            "kyma",
            "actor",
            "credential",
            "via",
            "action",
            "outcome",
        )

    def filter_kyma(self, queryset: QuerySet, name: str, value: str) -> QuerySet:
        namespace, slash, kyma_name = value.partition("/")
        kymas = (
            Kyma.objects.filter(namespace=namespace, name=kyma_name)
            if slash
            else Kyma.objects.filter(Q(name=value) | Q(runtime_id=value))
        )
        return queryset.filter(kyma_id__in=kymas.values("pk"))


class ChangeSerializer(serializers.Serializer):
    """One change of an entry. ``before`` and ``after`` are any JSON value, null included: their
    schema is the empty one (``allow_null`` would document them as ``oneOf [any, null]``, which a
    null breaks, being valid under both)."""

    field = serializers.CharField()
    before = serializers.JSONField(help_text="the value before (any JSON value; null: none)")
    after = serializers.JSONField(help_text="the value after (any JSON value; null: none)")


class AuditEntrySerializer(serializers.ModelSerializer):
    changes = ChangeSerializer(many=True, read_only=True)

    class Meta:
        model = AuditEntry
        fields = ("id", *AuditEntry.SHOWN_FIELDS, "changes")


_DOCS = (
    "Every write through the admin, the API, commands and module credentials, and every refused one, "
    "newest first: who (actor, credential), via which door, from where (source), the object and what "
    "changed (secrets redacted). Kept AUDIT_KEPT_DAYS days."
)


@extend_schema_view(
    list=extend_schema(
        tags=["audit"],
        description=_DOCS,
        responses={
            200: AuditEntrySerializer(many=True),
            400: ERROR_SCHEMA,
            401: ERROR_SCHEMA,
            403: ERROR_SCHEMA,
        },
    ),
    retrieve=extend_schema(
        tags=["audit"],
        responses={200: AuditEntrySerializer, 401: ERROR_SCHEMA, 403: ERROR_SCHEMA, 404: ERROR_SCHEMA},
    ),
)
class AuditEntryViewSet(viewsets.ReadOnlyModelViewSet):
    """Who did what (read-only): the audit trail, kept ``AUDIT_KEPT_DAYS`` days."""

    serializer_class = AuditEntrySerializer
    filterset_class = AuditEntryFilterSet
    queryset = AuditEntry.objects.order_by("-at", "-id")
