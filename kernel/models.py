"""Kubernetes-style object metadata shared by every resource model.

Each resource has a name (and usually a namespace), labels, annotations, a ``uid`` that the API
uses as its identifier, a ``generation`` that grows when the spec changes, and finalizers with a
deletion timestamp so deletion is two-step: a deleted object stays (state Deleting) until its
cleanup is done and the last finalizer is removed, exactly like a Kubernetes finalizer.
"""

from __future__ import annotations

import datetime
import json
import uuid
from typing import ClassVar

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models
from django.utils import timezone

from kernel.documents import schema

dns_label = RegexValidator(schema.DNS_LABEL, schema.PATTERN_RULES[schema.DNS_LABEL])
dns_subdomain = RegexValidator(schema.DNS_SUBDOMAIN, schema.PATTERN_RULES[schema.DNS_SUBDOMAIN])


class ResourceModel(models.Model):
    """Common metadata of a cluster-scoped resource."""

    uid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    name = models.CharField(max_length=253, validators=[dns_subdomain])
    labels = models.JSONField(
        default=dict, blank=True, validators=[schema.SchemaValidator(schema.LABELS, "labels")]
    )
    annotations = models.JSONField(
        default=dict, blank=True, validators=[schema.SchemaValidator(schema.ANNOTATIONS, "annotations")]
    )
    generation = models.PositiveBigIntegerField(default=1, editable=False)
    # Grows on every write through the services that changes the stored object (spec, labels,
    # annotations...); documents carry it as ``metadata.resourceVersion`` and a write that names
    # an older one is refused (optimistic concurrency, like Kubernetes).
    resource_version = models.PositiveBigIntegerField(default=1, editable=False)
    finalizers = models.JSONField(default=list, blank=True, editable=False)
    deletion_timestamp = models.DateTimeField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    updated_at = models.DateTimeField(auto_now=True)

    # Model fields that make up the spec: a change to any of them bumps ``generation``.
    SPEC_FIELDS: ClassVar[tuple[str, ...]] = ()
    # Fields the audit trail records only by size and digest (they may hold secrets).
    AUDIT_OPAQUE: ClassVar[tuple[str, ...]] = ()

    class Meta:
        abstract = True

    def __str__(self) -> str:
        return self.key

    @property
    def is_deleting(self) -> bool:
        return self.deletion_timestamp is not None

    def spec_snapshot(self) -> dict:
        return {field: getattr(self, field) for field in self.SPEC_FIELDS}

    @property
    def key(self) -> str:
        namespace = getattr(self, "namespace", "")
        return f"{namespace}/{self.name}" if namespace else self.name


class NamespacedResourceModel(ResourceModel):
    """Common metadata of a namespaced resource."""

    namespace = models.CharField(max_length=63, validators=[dns_label])

    class Meta:
        abstract = True


class IssuedKey(models.Model):
    """A named secret key with an optional expiry and revocation, stored only as its SHA-256 digest.

    The clear key is shown once, when it is issued (``kernel.api_tokens.key_issue``); afterwards
    only its first characters (``prefix``) identify it, so a leaked database or a glance at the
    admin never gives anyone a working key. People's API tokens and module managers' credentials
    are both issued keys: one machinery, one set of rules (expiry, revocation, last use)."""

    name = models.CharField(max_length=100, help_text="What the key is for, e.g. 'ci-deploy'.")
    prefix = models.CharField(max_length=16, editable=False, help_text="The key's first characters.")
    digest = models.CharField(max_length=64, unique=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(null=True, blank=True, help_text="Empty: the key never expires.")
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    revoked_at = models.DateTimeField(
        null=True, blank=True, editable=False, help_text="Set: the key no longer works (kept for the record)."
    )

    class Meta:
        abstract = True

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    def is_expired(self, now: datetime.datetime | None = None) -> bool:
        return self.expires_at is not None and self.expires_at <= (now or timezone.now())

    @property
    def key_state(self) -> str:
        """``Active``, ``Expired`` or ``Revoked``: what a request with this key would meet."""
        if self.revoked_at is not None:
            return "Revoked"
        return "Expired" if self.is_expired() else "Active"


class ApiToken(IssuedKey):
    """A person's named API key: it acts as its ``user`` with that user's permissions."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")

    class Meta:
        verbose_name = "API token"
        ordering = ("user", "name")
        constraints = (
            models.UniqueConstraint(
                fields=("user", "name"),
                name="kernel_apitoken_unique_name_per_user",
                violation_error_message="This user already has a token with this name.",
            ),
        )


class AuditEntry(models.Model):
    """One write through a door (admin, API, a command), or one refused: who, from where, when,
    to which object, and what changed (a diff with secrets redacted).

    Entries outlive their objects (no foreign keys: a deleted Kyma's history stays) and their
    actors (the user's name is kept as text). ``kyma_id`` ties an entry to the Kyma it concerns
    (the Kyma itself, its SyncResources, ModuleConfigs, kubeconfig), for its page's timeline.
    Written by ``kernel.audit``; kept ``AUDIT_KEPT_DAYS`` days."""

    class Outcome(models.TextChoices):
        DONE = "done", "Done"
        REFUSED = "refused", "Refused"

    at = models.DateTimeField(default=timezone.now, db_index=True)
    actor = models.CharField(max_length=150, help_text="The user, or the module of a module credential.")
    credential = models.CharField(
        max_length=160, blank=True, help_text="The API token or module credential used (empty: a session)."
    )
    via = models.CharField(max_length=16, help_text="admin, api or command")
    source = models.CharField(max_length=64, blank=True, help_text="The client's address.")
    forwarded_for = models.CharField(max_length=200, blank=True)
    request = models.CharField(max_length=200, blank=True, help_text="Method and path, or the command.")
    action = models.CharField(max_length=32)
    outcome = models.CharField(max_length=8, choices=Outcome.choices, default=Outcome.DONE)
    reason = models.TextField(blank=True, help_text="Why a write was refused.")
    kind = models.CharField(max_length=64, blank=True)
    namespace = models.CharField(max_length=63, blank=True)
    name = models.CharField(max_length=253, blank=True)
    uid = models.CharField(max_length=36, blank=True, db_index=True)
    kyma_id = models.BigIntegerField(null=True, blank=True)
    changes = models.JSONField(default=list, blank=True)

    # What an entry shows of itself, in order, wherever it is read (the API, the admin page).
    SHOWN_FIELDS: ClassVar[tuple[str, ...]] = (
        "at",
        "actor",
        "credential",
        "via",
        "source",
        "forwarded_for",
        "request",
        "action",
        "outcome",
        "reason",
        "kind",
        "namespace",
        "name",
        "uid",
    )

    class Meta:
        verbose_name = "audit entry"
        verbose_name_plural = "audit entries"
        ordering = ("-at", "-id")
        indexes = (
            models.Index(fields=("kyma_id", "-at"), name="audit_kyma_recent"),
            models.Index(fields=("kind", "namespace", "name"), name="audit_object"),
            models.Index(fields=("actor", "-at"), name="audit_actor_recent"),
        )

    def __str__(self) -> str:
        target = "/".join(part for part in (self.namespace, self.name) if part)
        return f"{self.actor} {self.action} {self.kind} {target} ({self.outcome})"

    @property
    def object_key(self) -> str:
        return "/".join(part for part in (self.namespace, self.name) if part)

    def change_lines(self) -> list[str]:
        """Each change as ``field: before → after`` (values as stored: redacted where secret)."""
        lines = []
        for change in self.changes or ():
            if isinstance(change, dict):
                lines.append(
                    f"{change.get('field')}: {_shown(change.get('before'))} → {_shown(change.get('after'))}"
                )
        return lines


def _shown(value: object) -> str:
    if value is None or value == "" or value == [] or value == {}:
        return "∅"
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)
