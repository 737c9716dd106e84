"""Role bindings, where each account comes from, and the sessions it holds open."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from kernel.documents import schema
from kernel.models import ResourceModel

from .roles import Role

NAME_LIST = {"type": "array", "items": schema.string(min_length=1, max_length=150), "maxItems": 500}


class FleetRoleBinding(ResourceModel):
    """Gives ``role`` to the members of identity-provider ``groups`` and to ``users`` (local users
    and service accounts, by user name), over the Kymas ``selector`` picks (empty: every Kyma).

    A user's rights are the union of its bindings'; its scope for a capability is the union of
    the selectors of the bindings that grant it (:mod:`access.scope`)."""

    role = models.CharField(max_length=16, choices=Role.choices)
    groups = models.JSONField(
        default=list, blank=True, validators=[schema.SchemaValidator(NAME_LIST, "groups")]
    )
    users = models.JSONField(
        default=list, blank=True, validators=[schema.SchemaValidator(NAME_LIST, "users")]
    )
    selector = models.JSONField(
        default=dict,
        blank=True,
        validators=[schema.SchemaValidator(schema.LABEL_SELECTOR, "selector")],
        help_text="A label selector over the Kymas' labels (matchLabels, matchExpressions); "
        "empty: every Kyma.",
    )
    description = models.CharField(max_length=500, blank=True)

    SPEC_FIELDS = ("role", "groups", "users", "selector", "description")

    class Meta:
        verbose_name = "fleet role binding"
        ordering = ("name",)
        constraints = (
            models.UniqueConstraint(
                fields=("name",),
                name="access_binding_unique_name",
                violation_error_message="A role binding with this name exists already.",
            ),
        )

    @property
    def scoped(self) -> bool:
        return bool(self.selector)


class Identity(models.Model):
    """Where an account comes from and, for a person of the identity provider, the groups the
    provider gave it at its last login (what its bindings match: a group removed at the
    provider is gone here at the next login)."""

    class Origin(models.TextChoices):
        LOCAL = "local", "Local password"
        OIDC = "oidc", "Single sign-on"
        SERVICE_ACCOUNT = "service-account", "Service account"

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="access_identity"
    )
    origin = models.CharField(max_length=16, choices=Origin.choices, default=Origin.LOCAL)
    issuer = models.CharField(max_length=300, blank=True)
    subject = models.CharField(max_length=255, blank=True, help_text="The provider's `sub` claim.")
    groups = models.JSONField(default=list, blank=True)
    groups_at = models.DateTimeField(
        null=True, blank=True, help_text="When the provider last said the groups."
    )
    description = models.CharField(max_length=500, blank=True)

    class Meta:
        verbose_name_plural = "identities"
        constraints = (
            models.UniqueConstraint(
                fields=("issuer", "subject"),
                condition=~models.Q(subject=""),
                name="access_identity_unique_subject",
            ),
        )

    def __str__(self) -> str:
        return f"{self.user} ({self.get_origin_display()})"


class OpenSession(models.Model):
    """A session a user logged in with: a logout ends every one of them (all browsers)."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="open_sessions")
    session_key = models.CharField(max_length=40, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    via = models.CharField(max_length=16, blank=True)

    class Meta:
        indexes = (models.Index(fields=("user", "created_at"), name="access_session_user"),)

    def __str__(self) -> str:
        return f"{self.user} since {self.created_at:%Y-%m-%d %H:%M}"
