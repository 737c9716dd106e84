"""The Kyma: desired state of one runtime (SKR) cluster, and what the control plane observed."""

from __future__ import annotations

from typing import ClassVar

from django.core.exceptions import ValidationError
from django.core.validators import MaxLengthValidator, MinLengthValidator, RegexValidator
from django.db import models

from kernel.documents import schema
from kernel.models import NamespacedResourceModel, dns_label, dns_subdomain
from kernel.sealing import SealedField

DEFAULT_NAMESPACE = "kcp-system"
DEFAULT_CHANNEL = "regular"
RUNTIME_ID_PATTERN = r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,62}[A-Za-z0-9])?$"

CHANNEL_SCHEMA = {
    **schema.string(pattern=schema.CHANNEL, min_length=3, max_length=32),
    "not": {"const": "none"},
}
MODULE_SCHEMA = schema.obj(
    {
        "name": schema.string(pattern=schema.DNS_LABEL, max_length=63),
        "channel": CHANNEL_SCHEMA,
        "controller": schema.STRING,
        "customResourcePolicy": schema.enum("CreateAndDelete", "Ignore"),
        "managed": schema.BOOLEAN,
        "remoteModuleTemplateRef": schema.STRING,
    },
    required=("name",),
)
MODULES_SCHEMA = {"type": "array", "items": MODULE_SCHEMA}
MODULE_DEFAULTS = {"customResourcePolicy": "CreateAndDelete", "managed": True}
# Upstream's pause switch: with this label set to "true" a Kyma is not reconciled (deletion still is).
SKIP_RECONCILIATION_LABEL = "operator.kyma-project.io/skip-reconciliation"


def validate_channel(value: str) -> None:
    if value == "none":
        raise ValidationError("'none' is reserved and cannot be used as a channel")


def validate_modules(value: object) -> None:
    """Structure via the schema, then the rule a schema cannot say: names are unique."""
    schema.SchemaValidator(MODULES_SCHEMA, "modules")(value)
    seen: dict[str, int] = {}
    problems = []
    for index, module in enumerate(value):  # type: ignore[arg-type]
        name = module["name"]
        if name in seen:
            problems.append(
                f"modules[{index}].name: duplicate module {name!r} (already at modules[{seen[name]}])"
            )
        seen.setdefault(name, index)
    if problems:
        raise ValidationError(problems)


def state_reason_of(conditions: list[dict]) -> str:
    """The reason of the first condition that is not True (conditions come in a fixed order, the
    runtime's reachability first), or "" when every condition holds."""
    for condition in conditions or ():
        if isinstance(condition, dict) and condition.get("status") != "True":
            return str(condition.get("reason") or "")[:64]
    return ""


class KymaState(models.TextChoices):
    """Upstream's states; the empty state means "not reconciled yet"."""

    NONE = "", "New"
    PROCESSING = "Processing"
    READY = "Ready"
    WARNING = "Warning"
    ERROR = "Error"
    DELETING = "Deleting"


class Kyma(NamespacedResourceModel):
    """One runtime: its modules, channel, access (kubeconfig) and observed status.

    ``runtime_id`` is the identity the runtime watcher proves with its client certificate (the
    certificate's CN), and ``skr_domain`` is the SAN that certificate carries: both are how the
    listener knows which Kyma an event is about and that the sender may speak for it.
    """

    namespace = models.CharField(max_length=63, default=DEFAULT_NAMESPACE, validators=[dns_label])
    runtime_id = models.CharField(
        "runtime ID",
        max_length=64,
        unique=True,
        validators=[
            RegexValidator(RUNTIME_ID_PATTERN, "letters, digits, '.', '_' or '-', at most 64 characters")
        ],
        help_text="Identity of the runtime: the CN of its watcher's client certificate.",
    )
    skr_domain = models.CharField(
        "SKR domain",
        max_length=253,
        blank=True,
        validators=[dns_subdomain],
        help_text="The runtime's domain: the SAN of its watcher certificate. Required for a certificate.",
    )
    channel = models.CharField(
        max_length=32,
        default=DEFAULT_CHANNEL,
        validators=[
            MinLengthValidator(3),
            MaxLengthValidator(32),
            RegexValidator(schema.CHANNEL, "lower-case letters only"),
            validate_channel,
        ],
    )
    modules = models.JSONField(default=list, blank=True, validators=[validate_modules])
    skip_maintenance_windows = models.BooleanField(default=False)
    kubeconfig = SealedField(help_text="Encrypted at rest; write-only.")

    # Observed status, written by the reconciler only.
    state = models.CharField(max_length=16, choices=KymaState.choices, default=KymaState.NONE, blank=True)
    conditions = models.JSONField(
        default=list, blank=True, validators=[schema.SchemaValidator(schema.CONDITIONS, "conditions")]
    )
    last_operation = models.JSONField(default=dict, blank=True)
    observed_generation = models.BigIntegerField(default=0)
    module_status = models.JSONField(default=list, blank=True)  # upstream's status.modules, as shown
    # The module CRs this control plane deletes when their module leaves the spec or the Kyma goes:
    # {module name: {apiVersion, kind, name, namespace}}, those under policy CreateAndDelete at the
    # last reconcile. Kept apart because upstream's status.modules has no place for the policy.
    owned_module_resources = models.JSONField(default=dict, blank=True, editable=False)
    active_channel = models.CharField(max_length=32, blank=True)
    # Why the Kyma is in its state (the reason of its first condition that is not True; empty when
    # all are), and when the reconciler last changed the status: the list sorts and groups by both.
    state_reason = models.CharField(max_length=64, blank=True)
    status_changed_at = models.DateTimeField(null=True, blank=True)

    # Scheduling of reconciles (see fleet.queue.requests).
    last_reconcile_at = models.DateTimeField(null=True, blank=True)
    next_reconcile_at = models.DateTimeField(null=True, blank=True)
    # The mark "a reconcile task is queued": when it may start at the earliest (its ETA), and the
    # time before which it must not read the runtime (events that arrived just before it started).
    reconcile_queued_at = models.DateTimeField(null=True, blank=True)
    reconcile_not_before = models.DateTimeField(null=True, blank=True)
    # The changes (one per line, see fleet.queue.changes) the runtime must have stored before the
    # queued reconcile reads it: those the events it covers reported.
    reconcile_changes = models.TextField(blank=True, default="", editable=False)
    # Until when the next reconcile waits for RECONCILE_MIN_SPACING (a hint for the mark's ETA).
    reconcile_spaced_until = models.DateTimeField(null=True, blank=True, editable=False)
    # The mark "an urgent (control-plane) reconcile task is queued beside the one above".
    reconcile_urgent_at = models.DateTimeField(null=True, blank=True, editable=False)
    lease_owner = models.CharField(max_length=128, blank=True)
    lease_until = models.DateTimeField(null=True, blank=True)
    error_streak = models.PositiveIntegerField(default=0)

    # What the reconciler last synced with the runtime (see reconciler).
    runtime_kyma_generation = models.BigIntegerField(default=0, editable=False)
    pushed_generation = models.BigIntegerField(default=0, editable=False)
    applied_watchers = models.JSONField(default=list, blank=True, editable=False)
    # The runtime-watcher settings this runtime gets (a RuntimeWatcherSettings digest; empty: the
    # fleet's, set by its next reconcile). A rollout of new settings moves it wave by wave.
    watcher_settings = models.CharField(max_length=64, blank=True, editable=False, db_index=True)
    # Runtime objects whose check can wait (reconciler.apply): "apiVersion|kind|ns|name" ->
    # [content hash, epoch seconds when seen holding it]; shared by every worker, written with the status.
    runtime_verified = models.JSONField(default=dict, blank=True, editable=False)

    # Liveness of the runtime watcher (heartbeats and events reach the listener).
    watcher_last_seen_at = models.DateTimeField(null=True, blank=True)
    watcher_report = models.JSONField(default=dict, blank=True)

    SPEC_FIELDS: ClassVar[tuple[str, ...]] = (
        "runtime_id",
        "skr_domain",
        "channel",
        "modules",
        "skip_maintenance_windows",
    )

    class Meta:
        verbose_name = "Kyma"
        constraints = [
            models.UniqueConstraint(fields=["namespace", "name"], name="kyma_unique_namespace_name")
        ]
        indexes = [
            models.Index(fields=["state", "name"], name="kyma_state_name"),
            models.Index(fields=["next_reconcile_at"], name="kyma_next_reconcile"),
            models.Index(fields=["name"], name="kyma_name"),
            models.Index(fields=["state", "state_reason"], name="kyma_state_reason"),
        ]
        ordering = ["namespace", "name"]

    @property
    def skip_reconciliation(self) -> bool:
        """Paused by upstream's label (exactly ``"true"``, as upstream compares it)."""
        return (self.labels or {}).get(SKIP_RECONCILIATION_LABEL) == "true"

    def module_entries(self) -> list[dict]:
        """The spec's modules with upstream's defaults filled in."""
        return [{**MODULE_DEFAULTS, **module} for module in self.modules]

    def condition(self, type_: str) -> dict | None:
        return next((c for c in self.conditions if c.get("type") == type_), None)
