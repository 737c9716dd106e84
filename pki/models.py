"""Certificate authorities and the certificates they issued.

Private keys are sealed (encrypted at rest) and never leave the services layer except where a
runtime's Secret or the listener's TLS context needs them.
"""

from __future__ import annotations

import datetime as dt
import uuid

from django.db import models
from django.utils import timezone

from kernel.sealing import SealedField


class CertificateStatus(models.TextChoices):
    VALID = "valid"
    RENEWING = "renewing"
    SUPERSEDED = "superseded"
    EXPIRED = "expired"


class CertificateMaterial(models.Model):
    """What every stored certificate has: the PEM, its sealed key and facts read from it."""

    uid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    common_name = models.CharField(max_length=64)
    serial = models.CharField(max_length=64)
    fingerprint = models.CharField("SHA-256 fingerprint", max_length=95, unique=True)
    key_type = models.CharField(max_length=16)
    certificate_pem = models.TextField("certificate (PEM)")
    private_key = SealedField()
    not_before = models.DateTimeField()
    not_after = models.DateTimeField(db_index=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        abstract = True

    def __str__(self) -> str:
        return f"{self.common_name} ({self.serial[:12]})"

    def is_expired(self, now: dt.datetime | None = None) -> bool:
        return self.not_after <= (now or timezone.now())


class CertificateAuthority(CertificateMaterial):
    """A root CA of the control plane.

    During a rotation several CAs are trusted at once (the bundle). The newest CA issues new
    certificates from the moment it joins the bundle; the listener keeps presenting a server
    certificate from the previous CA until ``serving_from``, so runtimes that have not received
    the new bundle yet keep trusting it. An expired CA leaves the bundle.
    """

    joined_bundle_at = models.DateTimeField(
        help_text="When runtimes started receiving it in their CA bundle."
    )
    serving_from = models.DateTimeField(
        help_text="From when the listener presents a server certificate issued by this CA."
    )
    imported = models.BooleanField(default=False)

    class Meta:
        verbose_name = "certificate authority"
        verbose_name_plural = "certificate authorities"
        ordering = ["-joined_bundle_at"]

    def status(self, now: dt.datetime | None = None, *, issuing: bool) -> str:
        if self.is_expired(now):
            return CertificateStatus.EXPIRED
        return CertificateStatus.VALID if issuing else CertificateStatus.SUPERSEDED


class CertificatePurpose(models.TextChoices):
    RUNTIME = "runtime", "Runtime watcher (server and client)"
    LISTENER = "listener", "Listener (server)"


class Certificate(CertificateMaterial):
    """A leaf certificate: one per Kyma for its runtime watcher, or the listener's server one."""

    purpose = models.CharField(max_length=16, choices=CertificatePurpose.choices)
    kyma = models.ForeignKey(
        "controlplane.Kyma", null=True, blank=True, on_delete=models.CASCADE, related_name="certificates"
    )
    issuer = models.ForeignKey(CertificateAuthority, on_delete=models.PROTECT, related_name="issued")
    dns_names = models.JSONField(default=list)
    renew_after = models.DateTimeField(db_index=True)
    superseded_at = models.DateTimeField(null=True, blank=True, db_index=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["purpose", "superseded_at", "renew_after"], name="cert_due")]
        constraints = [
            models.UniqueConstraint(
                fields=["kyma"],
                condition=models.Q(superseded_at__isnull=True, purpose="runtime"),
                name="cert_one_current_per_kyma",
            )
        ]

    def status(self, now: dt.datetime | None = None) -> str:
        now = now or timezone.now()
        if self.superseded_at is not None:
            return CertificateStatus.SUPERSEDED
        if self.is_expired(now):
            return CertificateStatus.EXPIRED
        if self.renew_after <= now:
            return CertificateStatus.RENEWING
        return CertificateStatus.VALID


class GatewaySecretState(models.Model):
    """What the control plane last wrote to (or found in) the Istio ingress gateway's credential
    Secret, one row per Secret: the metrics, the dashboard and an operator read it here, without a
    right to read the Secret itself. Written only by :func:`pki.gateway.gateway_secret_sync`."""

    namespace = models.CharField(max_length=63)
    name = models.CharField(max_length=253)
    certificate_fingerprint = models.CharField("server certificate (SHA-256)", max_length=95, blank=True)
    certificate_not_after = models.DateTimeField("server certificate expires", null=True, blank=True)
    bundle_fingerprints = models.JSONField("CAs in ca.crt", default=list)
    synced_at = models.DateTimeField("last found current or written", null=True, blank=True)
    written_at = models.DateTimeField("last written", null=True, blank=True)
    writes = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True)
    error_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "gateway secret"
        constraints = [models.UniqueConstraint(fields=["namespace", "name"], name="gateway_secret_unique")]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"
