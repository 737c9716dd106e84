"""ModuleConfig: a module's configuration in one runtime, for its manager to read."""

from __future__ import annotations

from typing import ClassVar

from django.db import connection, models, transaction

from kernel.documents import schema
from kernel.models import NamespacedResourceModel

MODULE_CONFIG_STATUS_SCHEMA = schema.obj(
    {
        "state": schema.enum("", "Processing", "Ready", "Warning", "Error", "Deleting"),
        "message": schema.STRING,
        "conditions": schema.CONDITIONS,
        "observedRevision": schema.INTEGER,
    },
    additional=True,
)


class RevisionCounter(models.Model):
    """A named, gap-free sequence. Writers hold its row lock until commit, so revisions become
    visible in increasing order and a reader of ``since_revision=N`` never misses one."""

    name = models.CharField(max_length=64, primary_key=True)
    value = models.BigIntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.name}={self.value}"

    @classmethod
    def next(cls, name: str) -> int:
        """The next value, in one statement (``UPDATE ... RETURNING``): the row stays locked until
        the caller's transaction ends, so callers take it as late as they can."""
        if not transaction.get_connection().in_atomic_block:
            raise RuntimeError("RevisionCounter.next() must run inside a transaction")
        table = connection.ops.quote_name(cls._meta.db_table)
        sql = f"UPDATE {table} SET value = value + 1 WHERE name = %s RETURNING value"
        with connection.cursor() as cursor:
            cursor.execute(sql, [name])
            row = cursor.fetchone()
            if row is None:  # the first use of this name
                cls.objects.get_or_create(name=name)
                cursor.execute(sql, [name])
                row = cursor.fetchone()
        return row[0]


class ModuleConfig(NamespacedResourceModel):
    """The module CR's spec as found in the runtime (one per Kyma and module).

    ``revision`` grows, across all ModuleConfigs, each time the spec or status really changes, so
    a module manager catches up with ``GET /api/v1/moduleconfigs/?since_revision=N``.
    """

    kyma = models.ForeignKey("controlplane.Kyma", on_delete=models.CASCADE, related_name="module_configs")
    module = models.ForeignKey("controlplane.Module", on_delete=models.CASCADE, related_name="configs")
    spec = models.JSONField(default=dict, blank=True)
    # The module version the manager should run in this runtime: the runtime's own target (a
    # rollout may hold an older one), unless a maintenance window holds the installed one.
    version = models.CharField(max_length=32, blank=True)
    source_generation = models.BigIntegerField(default=0)
    source_resource_version = models.CharField(max_length=64, blank=True)
    status = models.JSONField(
        default=dict,
        blank=True,
        validators=[schema.SchemaValidator(MODULE_CONFIG_STATUS_SCHEMA, "status")],
    )
    revision = models.BigIntegerField(default=0, db_index=True, editable=False)
    # The revision that created it: a watch resumed from N calls it ADDED when this is above N.
    created_revision = models.BigIntegerField(default=0, editable=False)

    SPEC_FIELDS: ClassVar[tuple[str, ...]] = ("spec", "version")
    REVISION_SEQUENCE = "moduleconfig"

    class Meta:
        verbose_name = "module config"
        constraints = [
            models.UniqueConstraint(fields=["kyma", "module"], name="moduleconfig_unique_kyma_module")
        ]
        ordering = ["revision"]


class ModuleConfigDeletion(models.Model):
    """A deleted ModuleConfig, with the revision of its deletion (a tombstone).

    A watch resumed from revision N must tell its manager about configs deleted after N (a module
    removed from a Kyma, a Kyma or Module deleted) although their rows are gone; this row keeps
    what a DELETED event needs. Written by the ``post_delete`` receiver in ``fleet.services``.
    """

    revision = models.BigIntegerField(unique=True)
    uid = models.UUIDField()
    namespace = models.CharField(max_length=63)
    name = models.CharField(max_length=253)
    kyma_name = models.CharField(max_length=253)
    runtime_id = models.CharField(max_length=253, blank=True)
    module_name = models.CharField(max_length=63, db_index=True)
    deleted_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name = "module config deletion"
        ordering = ["revision"]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}@{self.revision}"


class ModuleConfigWatch(models.Model):
    """One open watch of ModuleConfigs, holding one of its credential's slots.

    ``(credential, slot)`` is unique and a credential has ``MODULECONFIG_WATCH_PER_CREDENTIAL``
    slots, so the bound holds across every web process without a lock; ``expires_at`` is renewed
    while the watch streams, so the slot of a process that died frees itself.
    """

    credential = models.CharField(max_length=128)
    slot = models.PositiveIntegerField()
    module = models.CharField(max_length=63, blank=True)
    opened_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(db_index=True)

    class Meta:
        verbose_name = "module config watch"
        constraints = [
            models.UniqueConstraint(fields=["credential", "slot"], name="moduleconfigwatch_unique_slot")
        ]

    def __str__(self) -> str:
        return f"{self.credential}#{self.slot}"
