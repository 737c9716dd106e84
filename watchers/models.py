"""The Watcher: which runtime resources every runtime watcher reports, and to whom."""

from __future__ import annotations

from typing import Any, ClassVar

from django.core.exceptions import ValidationError
from django.db import models

from fleet.k8s.ownership import MANAGED_BY_LABEL
from kernel.documents import schema
from kernel.models import NamespacedResourceModel, dns_label

DEFAULT_GATEWAY = {"selector": {"matchLabels": {"operator.kyma-project.io/watcher-gateway": "default"}}}

RESOURCE_TO_WATCH_SCHEMA = schema.obj(
    {
        "group": {"anyOf": [{"const": ""}, schema.string(pattern=schema.DNS_SUBDOMAIN)]},
        "version": {"anyOf": [{"const": "*"}, schema.string(pattern=schema.DNS_LABEL)]},
        "resource": {"anyOf": [{"const": "*"}, schema.string(pattern=schema.DNS_LABEL)]},
    },
    required=("group", "version", "resource"),
)
SERVICE_INFO_SCHEMA = schema.obj(
    {
        "name": schema.string(pattern=schema.DNS_LABEL),
        "namespace": schema.string(pattern=schema.DNS_LABEL),
        "port": {"type": "integer", "minimum": 1, "maximum": 65535},
    },
    required=("name", "namespace", "port"),
)
GATEWAY_SCHEMA = schema.obj({"selector": schema.LABEL_SELECTOR}, required=("selector",))


class WatcherField(models.TextChoices):
    SPEC = "spec"
    STATUS = "status"


class WatcherState(models.TextChoices):
    NONE = "", "New"
    PROCESSING = "Processing"
    READY = "Ready"
    WARNING = "Warning"
    ERROR = "Error"
    DELETING = "Deleting"


def component_name(manager: str, labels: dict) -> str:
    """The manager's name: ``spec.manager``, else the managed-by label (upstream's rule)."""
    return manager or (labels or {}).get(MANAGED_BY_LABEL, "")


class Watcher(NamespacedResourceModel):
    """One kind of change to watch in every runtime, and the component that handles it.

    Each Watcher becomes one webhook in every runtime's ``skr-webhook`` configuration, and one
    route ``/v{1,2}/<component>/event`` on the listener. ``component`` is derived from
    ``manager`` or the managed-by label and is unique, so a route always has one owner.
    """

    manager = models.CharField(max_length=63, blank=True)
    component = models.CharField(max_length=63, unique=True, editable=False)
    labels_to_watch = models.JSONField(
        default=dict, blank=True, validators=[schema.SchemaValidator(schema.LABELS, "labelsToWatch")]
    )
    resource_to_watch = models.JSONField(
        validators=[schema.SchemaValidator(RESOURCE_TO_WATCH_SCHEMA, "resourceToWatch")]
    )
    field = models.CharField(max_length=8, choices=WatcherField.choices, default=WatcherField.SPEC)
    service_info = models.JSONField(validators=[schema.SchemaValidator(SERVICE_INFO_SCHEMA, "serviceInfo")])
    gateway = models.JSONField(
        default=dict, blank=True, validators=[schema.SchemaValidator(GATEWAY_SCHEMA, "gateway")]
    )

    state = models.CharField(
        max_length=16, choices=WatcherState.choices, default=WatcherState.NONE, blank=True
    )
    conditions = models.JSONField(
        default=list, blank=True, validators=[schema.SchemaValidator(schema.CONDITIONS, "conditions")]
    )
    observed_generation = models.BigIntegerField(default=0)
    # While a rollout takes its change to the runtimes: {"rollout": id, "from": the webhook entry's
    # fields before (null: the Watcher is new), "fromMark": its rollout mark}; runtimes not yet in
    # the rollout's waves keep the old entry (fleet.rollouts.targets).
    rollout_hold = models.JSONField(null=True, blank=True, editable=False)

    SPEC_FIELDS: ClassVar[tuple[str, ...]] = (
        "manager",
        "labels_to_watch",
        "resource_to_watch",
        "field",
        "service_info",
        "gateway",
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["namespace", "name"], name="watcher_unique_namespace_name")
        ]
        ordering = ["namespace", "name"]

    def save(self, *args: Any, **kwargs: Any) -> None:
        """``rollout_hold`` is written by the rollouts alone (see ``Module.save``)."""
        if self.pk is not None and kwargs.get("update_fields") is None and not kwargs.get("force_insert"):
            kwargs["update_fields"] = [
                f.name for f in self._meta.concrete_fields if not f.primary_key and f.name != "rollout_hold"
            ]
        super().save(*args, **kwargs)

    def clean(self) -> None:
        self.component = component_name(self.manager, self.labels)
        if not self.component:
            reason = f"set spec.manager or the label {MANAGED_BY_LABEL}: the component name is required"
            raise ValidationError({"manager": reason})
        try:
            dns_label(self.component)
        except ValidationError as exc:
            raise ValidationError(
                {"manager": f"component name {self.component!r}: {exc.messages[0]}"}
            ) from exc
        clash = Watcher.objects.filter(component=self.component).exclude(pk=self.pk).first()
        if clash is not None:
            raise ValidationError(
                {"manager": f"component {self.component!r} is already served by Watcher {clash.key}"}
            )

    @property
    def webhook_name(self) -> str:
        return f"{self.namespace}.{self.name}.operator.kyma-project.io"

    @property
    def gateway_or_default(self) -> dict:
        return self.gateway or DEFAULT_GATEWAY
