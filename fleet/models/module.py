"""The module catalog: what can be enabled in a Kyma, and who manages it."""

from __future__ import annotations

import copy
from typing import Any, ClassVar

from django.core.exceptions import ValidationError
from django.db import models

from kernel.documents import schema
from kernel.models import ResourceModel, dns_label, dns_subdomain
from kernel.sealing import SealedField

from .manifest_policy import KINDS_SCHEMA, NAMESPACES_SCHEMA, ManifestPolicy
from .rollout import validate_policy

# A module version as upstream's ModuleTemplate and ModuleReleaseMeta take it (semantic, at most 32).
VERSION = r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[a-zA-Z-][0-9a-zA-Z-]*)?$"
VERSION_SCHEMA = schema.string(pattern=VERSION, max_length=32)
CHANNELS_SCHEMA = {
    "type": "object",
    "propertyNames": {"pattern": schema.CHANNEL, "minLength": 3, "maxLength": 32, "not": {"const": "none"}},
    "additionalProperties": VERSION_SCHEMA,
    "minProperties": 1,
}
VERSIONS_SCHEMA = {
    "type": "array",
    "items": schema.obj(
        {"version": VERSION_SCHEMA, "requiresDowntime": schema.BOOLEAN}, required=("version",)
    ),
    "maxItems": 200,
}


def validate_versions(value: object) -> None:
    schema.SchemaValidator(VERSIONS_SCHEMA, "versions")(value)
    seen = [entry["version"] for entry in value]  # type: ignore[union-attr]
    twice = sorted({version for version in seen if seen.count(version) > 1})
    if twice:
        raise ValidationError(f"versions: {', '.join(twice)} listed more than once")


DEFAULT_CR_SCHEMA = schema.obj(
    {
        "metadata": schema.obj(
            {
                "name": schema.string(pattern=schema.DNS_SUBDOMAIN),
                "namespace": schema.string(pattern=schema.DNS_LABEL),
                "labels": schema.LABELS,
                "annotations": schema.ANNOTATIONS,
            }
        ),
        "spec": {"type": "object"},
    }
)


class Module(ResourceModel):
    """A module offered in channels, its custom resource (CR) in the runtime and its manager.

    The module CR (``group/version/kind``, served as ``plural``) is what the user edits in the
    runtime; the control plane copies its spec into a ModuleConfig for the manager, which answers
    with SyncResources. ``manager`` is the Watcher component whose events concern this module.
    """

    name = models.CharField(max_length=63, unique=True, validators=[dns_label])
    channels = models.JSONField(
        default=dict,
        validators=[schema.SchemaValidator(CHANNELS_SCHEMA, "channels")],
        help_text='Channel to version, e.g. {"regular": "1.2.0", "fast": "1.3.0"}.',
    )
    cr_group = models.CharField("CR group", max_length=253, blank=True, validators=[dns_subdomain])
    cr_version = models.CharField("CR version", max_length=63, validators=[dns_label])
    cr_kind = models.CharField("CR kind", max_length=63)
    cr_plural = models.CharField("CR plural", max_length=63, validators=[dns_label])
    cr_namespace = models.CharField(
        "CR namespace", max_length=63, default="kyma-system", validators=[dns_label]
    )
    cr_name = models.CharField("CR name", max_length=253, default="default", validators=[dns_subdomain])
    default_cr = models.JSONField(
        "default CR",
        default=dict,
        blank=True,
        validators=[schema.SchemaValidator(DEFAULT_CR_SCHEMA, "defaultCR")],
        help_text="Labels, annotations and spec of the CR created when the policy is CreateAndDelete.",
    )
    manager = models.CharField(
        max_length=63, blank=True, validators=[dns_label], help_text="Component name of the module's manager."
    )
    manager_url = models.URLField(
        "manager URL", blank=True, help_text="Where change notifications are POSTed."
    )
    notify_secret = SealedField(help_text="HMAC key for signing notifications; write-only.")
    manifest_namespaces = models.JSONField(
        default=list,
        blank=True,
        validators=[schema.SchemaValidator(NAMESPACES_SCHEMA, "namespaces")],
        help_text='Namespaces its SyncResources may write namespaced objects into, e.g. ["kyma-system", '
        '"keda"] ("*": any). Empty: the CR namespace.',
    )
    manifest_kinds = models.JSONField(
        default=list,
        blank=True,
        validators=[schema.SchemaValidator(KINDS_SCHEMA, "kinds")],
        help_text="Cluster-scoped (or unknown) kinds its SyncResources may contain, e.g. "
        '[{"group": "rbac.authorization.k8s.io", "kind": "ClusterRole"}] (version optional; "*" matches '
        "any).",
    )

    versions = models.JSONField(
        default=list,
        blank=True,
        validators=[validate_versions],
        help_text='What is known of each version, as upstream\'s ModuleTemplate says it: [{"version": '
        '"1.2.0", "requiresDowntime": true}]. A version that requires downtime reaches a runtime that '
        "has the module already only inside its maintenance window.",
    )
    rollout_policy = models.JSONField(
        default=dict,
        blank=True,
        validators=[validate_policy],
        help_text='How a new version in a channel goes out, over ROLLOUT_POLICY\'s: {"waves": [{"size": 1}, '
        '{"size": "100%"}], "gate": {"timeoutSeconds": 600}} or {"strategy": "AllAtOnce"}.',
    )
    # Channels whose new version is going out in a rollout: {channel: {"rollout": id, "from":
    # version}}; runtimes not yet in its waves keep "from" (fleet.rollouts.targets).
    rollout_holds = models.JSONField(default=dict, blank=True, editable=False)

    SPEC_FIELDS: ClassVar[tuple[str, ...]] = (
        "channels",
        "versions",
        "rollout_policy",
        "cr_group",
        "cr_version",
        "cr_kind",
        "cr_plural",
        "cr_namespace",
        "cr_name",
        "default_cr",
        "manager",
        "manager_url",
        "manifest_namespaces",
        "manifest_kinds",
    )

    class Meta:
        ordering = ["name"]

    def save(self, *args: Any, **kwargs: Any) -> None:
        """``rollout_holds`` is written by the rollouts alone (an UPDATE of that column): a save of
        a form or document loaded before a rollout changed it must not put back what it read."""
        if self.pk is not None and kwargs.get("update_fields") is None and not kwargs.get("force_insert"):
            kwargs["update_fields"] = [
                f.name for f in self._meta.concrete_fields if not f.primary_key and f.name != "rollout_holds"
            ]
        super().save(*args, **kwargs)

    @property
    def notifies(self) -> bool:
        """Whether its manager gets change notifications (it has a URL and a key for them)."""
        return bool(self.manager_url and self.notify_secret)

    def clean(self) -> None:
        if self.cr_kind and not self.cr_kind[:1].isupper():
            raise ValidationError({"cr_kind": "a kind starts with an upper-case letter (e.g. Keda)"})

    def default_cr_object(self) -> dict[str, Any]:
        """The module's default CR as a whole object: what the control plane creates in a runtime
        (under policy CreateAndDelete, with its own labels added) and a ModuleTemplate's ``data``."""
        default = copy.deepcopy(self.default_cr or {})
        metadata = default.get("metadata") or {}
        return {
            "apiVersion": self.cr_api_version,
            "kind": self.cr_kind,
            "metadata": {
                "name": metadata.get("name") or self.cr_name,
                "namespace": metadata.get("namespace") or self.cr_namespace,
                **{key: metadata[key] for key in ("labels", "annotations") if metadata.get(key)},
            },
            "spec": default.get("spec") or {},
        }

    @property
    def cr_api_version(self) -> str:
        return f"{self.cr_group}/{self.cr_version}" if self.cr_group else self.cr_version

    @property
    def manifest_policy(self) -> ManifestPolicy:
        return ManifestPolicy.of(self)

    def version_for(self, channel: str) -> str | None:
        """The channel's version in the catalog (a runtime's own may be older: see
        ``fleet.rollouts.targets``)."""
        return self.channels.get(channel)

    def requires_downtime(self, version: str) -> bool:
        return any(e.get("version") == version and e.get("requiresDowntime") for e in self.versions or ())
