"""Read-only API of certificates and CAs (never a private key)."""

from __future__ import annotations

import django_filters
from django.db.models import QuerySet
from django.utils import timezone
from rest_framework import serializers, viewsets

from . import selectors
from .models import Certificate, CertificateAuthority, CertificatePurpose, CertificateStatus


class CertificateAuthoritySerializer(serializers.ModelSerializer):
    role = serializers.SerializerMethodField()

    class Meta:
        model = CertificateAuthority
        fields = (
            "uid",
            "common_name",
            "serial",
            "fingerprint",
            "key_type",
            "not_before",
            "not_after",
            "joined_bundle_at",
            "serving_from",
            "imported",
            "role",
            "certificate_pem",
        )

    def get_role(self, ca: CertificateAuthority) -> str:
        now = timezone.now()
        if ca.is_expired(now):
            return "expired"
        issuing, serving = selectors.issuing_authority(now), selectors.serving_authority(now)
        roles = [
            name
            for name, other in (("issuing", issuing), ("serving", serving))
            if other and other.pk == ca.pk
        ]
        return "+".join(roles) or "trusted"


class CertificateSerializer(serializers.ModelSerializer):
    # The listener's certificate belongs to no Kyma: null, as the schema says.
    kyma = serializers.SlugRelatedField(slug_field="name", read_only=True, allow_null=True)
    issuer = serializers.SlugRelatedField(slug_field="fingerprint", read_only=True)
    status = serializers.CharField(source="current_status", read_only=True)

    class Meta:
        model = Certificate
        fields = (
            "uid",
            "purpose",
            "kyma",
            "common_name",
            "dns_names",
            "serial",
            "fingerprint",
            "key_type",
            "issuer",
            "not_before",
            "not_after",
            "renew_after",
            "superseded_at",
            "status",
            "certificate_pem",
        )


class CertificateFilterSet(django_filters.FilterSet):
    purpose = django_filters.ChoiceFilter(choices=CertificatePurpose.choices)
    status = django_filters.ChoiceFilter(field_name="current_status", choices=CertificateStatus.choices)
    kyma = django_filters.CharFilter(field_name="kyma__name")

    class Meta:
        model = Certificate
        fields = ("purpose", "status", "kyma", "serial", "fingerprint")


class CertificateViewSet(viewsets.ReadOnlyModelViewSet):
    """Issued certificates, read only: each runtime watcher's and the listener's (never their keys)."""

    serializer_class = CertificateSerializer
    filterset_class = CertificateFilterSet
    lookup_field = "uid"
    lookup_url_kwarg = "id"
    queryset = Certificate.objects.all()

    def get_queryset(self) -> QuerySet:
        return selectors.certificates_with_status().select_related("kyma", "issuer").order_by("-created_at")


class CertificateAuthorityViewSet(viewsets.ReadOnlyModelViewSet):
    """The certificate authorities, read only, and what each does now (never their keys)."""

    serializer_class = CertificateAuthoritySerializer
    lookup_field = "uid"
    lookup_url_kwarg = "id"
    queryset = CertificateAuthority.objects.order_by("-joined_bundle_at")
