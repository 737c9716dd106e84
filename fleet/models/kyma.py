"""The Kyma: desired state of one runtime (SKR) cluster, and what the control plane observed."""

from __future__ import annotations

import datetime as dt
from typing import Any, ClassVar

from django.core.exceptions import ObjectDoesNotExist, ValidationError
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
# Upstream's finalizer (capital K), so a Kyma moves between upstream and us as it is. Ours before was
# the lower-case one: a Kyma still carrying it gets upstream's in its place, and deletion honours both.
KYMA_FINALIZER = "operator.kyma-project.io/Kyma"
OUR_KYMA_FINALIZERS = frozenset({KYMA_FINALIZER, "operator.kyma-project.io/kyma"})


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

    # What the machinery keeps beside the Kyma, read-only here (each row has one writer, see
    # fleet.models.bookkeeping): the defaults when the row was never written. Lists read them
    # with ``select_related`` (one query), a single Kyma page with a query per row.
    def _beside(self, row: str, name: str, default: Any) -> Any:
        try:
            return getattr(getattr(self, row), name)
        except ObjectDoesNotExist:
            return default

    @property
    def last_reconcile_at(self) -> dt.datetime | None:
        return self._beside("reconcile_state", "last_reconcile_at", None)

    @property
    def next_reconcile_at(self) -> dt.datetime | None:
        return self._beside("reconcile_state", "next_reconcile_at", None)

    @property
    def error_streak(self) -> int:
        return self._beside("reconcile_state", "error_streak", 0)

    @property
    def lease_owner(self) -> str:
        return self._beside("reconcile_state", "lease_owner", "")

    @property
    def lease_until(self) -> dt.datetime | None:
        return self._beside("reconcile_state", "lease_until", None)

    @property
    def watcher_last_seen_at(self) -> dt.datetime | None:
        return self._beside("watcher_contact", "last_seen_at", None)

    @property
    def watcher_report(self) -> dict:
        return self._beside("watcher_contact", "report", {})

    @property
    def applied_watchers(self) -> list:
        return self._beside("runtime_sync", "applied_watchers", [])

    @property
    def runtime_verified(self) -> dict:
        return self._beside("runtime_sync", "runtime_verified", {})

    @property
    def runtime_kyma_generation(self) -> int:
        return self._beside("runtime_sync", "runtime_kyma_generation", 0)

    @property
    def pushed_generation(self) -> int:
        return self._beside("runtime_sync", "pushed_generation", 0)

    @property
    def watcher_settings(self) -> str:
        return self._beside("watcher_settings_pin", "digest", "")
