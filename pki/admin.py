"""Admin of CAs and certificates: read-only facts, renew, and a confirmed CA rotation."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html

from fleet import queue
from kernel import audit
from kernel.admin import AuditHistoryMixin, state_badge
from kernel.errors import ApplicationError

from . import selectors, services
from .gateway import gateway_secret_sync_request
from .jobs import ca_rotation_start
from .metrics import EXPIRING_WITHIN, OVERDUE_AFTER
from .models import Certificate, CertificateAuthority, CertificatePurpose, CertificateStatus

STATUS_STATES = {"valid": "Ready", "renewing": "Processing", "superseded": "", "expired": "Error"}
READ_ONLY = (
    "uid",
    "common_name",
    "serial",
    "fingerprint",
    "key_type",
    "certificate_pem",
    "not_before",
    "not_after",
    "created_at",
)


class ReadOnlyAdmin(admin.ModelAdmin):
    show_full_result_count = False

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(CertificateAuthority)
class CertificateAuthorityAdmin(AuditHistoryMixin, ReadOnlyAdmin):
    list_display = (
        "common_name",
        "short_fingerprint",
        "serial",
        "not_before",
        "not_after",
        "role",
        "imported",
    )
    readonly_fields = (*READ_ONLY, "joined_bundle_at", "serving_from", "imported")
    exclude = ("private_key",)
    change_list_template = "admin/pki/certificateauthority/change_list.html"

    @admin.display(description="Fingerprint")
    def short_fingerprint(self, ca: CertificateAuthority) -> str:
        return ca.fingerprint[:23] + "…"

    @admin.display(description="Role")
    def role(self, ca: CertificateAuthority) -> str:
        now = timezone.now()
        if ca.is_expired(now):
            return state_badge("Error", "expired")
        issuing, serving = selectors.issuing_authority(now), selectors.serving_authority(now)
        roles = [
            name
            for name, other in (("issuing", issuing), ("serving", serving))
            if other and other.pk == ca.pk
        ]
        return state_badge("Ready" if roles else "", " + ".join(roles) or "trusted (in bundle)")

    def get_urls(self) -> list:
        rotate = path(
            "rotate/", self.admin_site.admin_view(self.rotate_view), name="pki_certificateauthority_rotate"
        )
        return [rotate, *super().get_urls()]

    def rotate_view(self, request: HttpRequest) -> HttpResponse:
        """Confirmation page, then the rotation (the same ``ca_rotate`` as ``manage.py pki
        rotate-ca``) and a job that re-issues every runtime certificate, on a progress page."""
        if not request.user.has_perm("pki.add_certificateauthority") and not request.user.is_superuser:
            if request.method == "POST":
                audit.record_refusal(
                    ApplicationError("you may not rotate the CA"),
                    action="rotate",
                    kind="CertificateAuthority",
                )
            messages.error(request, "You may not rotate the CA.")
            return HttpResponseRedirect(reverse("admin:pki_certificateauthority_changelist"))
        if request.method == "POST":
            # The rotation is immediate; re-issuing thousands of certificates is a job with a progress page.
            try:
                job = ca_rotation_start(user=request.user)
            except ApplicationError as exc:
                audit.record_refusal(exc, action="rotate", kind="CertificateAuthority")
                messages.error(request, exc.message)
                return HttpResponseRedirect(reverse("admin:pki_certificateauthority_changelist"))
            messages.success(
                request,
                f"New CA {job.result['ca'][:23]}… joined the bundle. Job {job.pk} re-issues the runtime "
                "certificates; this page follows it.",
            )
            return HttpResponseRedirect(reverse("admin:controlplane_job_change", args=[job.pk]))
        context = {
            **self.admin_site.each_context(request),
            "title": "Rotate the certificate authority",
            "opts": self.model._meta,
            "runtime_certificates": Certificate.objects.filter(
                purpose=CertificatePurpose.RUNTIME, superseded_at__isnull=True
            ).count(),
            "grace_days": services.policy().ca_grace.days,
        }
        return TemplateResponse(request, "admin/pki/certificateauthority/rotate.html", context)


class StatusFilter(admin.SimpleListFilter):
    title = "status"
    parameter_name = "status"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(value, label) for value, label in CertificateStatus.choices]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        if self.value():
            return queryset.filter(current_status=self.value())
        return queryset


class CertificateAttentionFilter(admin.SimpleListFilter):
    """Current certificates that need a look (``?attention=expiring|overdue``), with the same
    thresholds as the ``controlplane_certificates_expiring_soon`` and
    ``controlplane_certificate_renewals_overdue`` metrics."""

    title = "needs attention"
    parameter_name = "attention"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [
            ("expiring", f"expiring within {EXPIRING_WITHIN.days} days"),
            ("overdue", "renewal overdue"),
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        now = timezone.now()
        if self.value() == "expiring":
            return queryset & selectors.certificates_expiring(EXPIRING_WITHIN, now)
        if self.value() == "overdue":
            return queryset & selectors.renewals_overdue(OVERDUE_AFTER, now)
        return queryset


@admin.register(Certificate)
class CertificateAdmin(AuditHistoryMixin, ReadOnlyAdmin):
    list_display = ("common_name", "purpose", "kyma", "sans", "serial_short", "not_after", "status_badge")
    list_filter = (CertificateAttentionFilter, StatusFilter, "purpose", "issuer")
    list_select_related = ("kyma",)
    search_fields = ("common_name", "kyma__name", "serial", "fingerprint")
    readonly_fields = (*READ_ONLY, "purpose", "kyma", "issuer", "dns_names", "renew_after", "superseded_at")
    exclude = ("private_key",)
    actions = ("renew",)

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        return (
            super().get_queryset(request).annotate(current_status=selectors.status_expression(timezone.now()))
        )

    def has_renew_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("pki.view_certificate") and request.user.is_staff

    @admin.display(description="SANs")
    def sans(self, cert: Certificate) -> str:
        return ", ".join(cert.dns_names)

    @admin.display(description="Serial")
    def serial_short(self, cert: Certificate) -> str:
        return cert.serial[:16]

    @admin.display(description="Status", ordering="current_status")
    def status_badge(self, cert: Certificate) -> str:
        status = getattr(cert, "current_status", None) or cert.status()
        return format_html("{}", state_badge(STATUS_STATES[status], status))

    @admin.action(description="Renew now", permissions=["renew"])
    def renew(self, request: HttpRequest, queryset: QuerySet) -> None:
        kymas = []
        renewed_listener = False
        for cert in queryset.select_related("kyma").filter(superseded_at__isnull=True):
            try:
                if cert.purpose == CertificatePurpose.RUNTIME and cert.kyma is not None:
                    services.certificate_issue_for_kyma(kyma=cert.kyma)
                    kymas.append(cert.kyma.pk)
                elif cert.purpose == CertificatePurpose.LISTENER:
                    services.listener_certificate_renew()
                    renewed_listener = True
            except ApplicationError as exc:
                audit.record_refusal(
                    exc, action="renew", kind="Certificate", name=cert.common_name, uid=str(cert.uid)
                )
                messages.error(request, f"{cert}: {exc.message}")
        if kymas:
            queue.request(kymas, reason="certificate renewed by an operator")
        if renewed_listener:
            gateway_secret_sync_request()  # where the control plane keeps the gateway's Secret
        count = len(kymas) + int(renewed_listener)
        messages.success(
            request, f"Renewed {count} certificate(s); runtimes receive theirs on their next reconcile."
        )
