"""SyncResource: manifests a module manager wants in one runtime, and how to apply them."""

from __future__ import annotations

from typing import Any, ClassVar

from django.core.exceptions import ValidationError
from django.db import models

from kernel.documents.yamlio import DocumentError, load_documents
from kernel.models import NamespacedResourceModel

MAX_MANIFESTS = 500
MAX_MANIFEST_BYTES = 1024 * 1024


class ApplyStrategy(models.TextChoices):
    SERVER_SIDE_APPLY = "ServerSideApply", "Server-side apply"
    CREATE_ONLY = "CreateOnly", "Create only (never overwrite)"
    READ_ONLY = "ReadOnly", "Read only (observe, never write)"


class DeletionPolicy(models.TextChoices):
    DELETE = "Delete"
    ORPHAN = "Orphan"


class ManifestState(models.TextChoices):
    APPLIED = "Applied"
    FAILED = "Failed"
    PENDING = "Pending"


def manifest_identity(doc: dict[str, Any]) -> tuple[str, str, str, str]:
    """(apiVersion group, kind, namespace, name): what makes two manifests the same object."""
    group = doc["apiVersion"].rpartition("/")[0]
    metadata = doc["metadata"]
    return group, doc["kind"], metadata.get("namespace") or "", metadata["name"]


def parse_manifests(text: str, *, stored: bool = False) -> list[dict[str, Any]]:
    """Parse and check a multi-document YAML stream of Kubernetes objects.

    Each document needs ``apiVersion``, ``kind`` and ``metadata.name`` (strings), and no object
    may appear twice. Raises ``ValidationError`` naming the document (1-based) and the field.
    ``stored``: the text was validated when it was stored (see ``load_documents``).
    """
    if len(text.encode()) > MAX_MANIFEST_BYTES:
        raise ValidationError(f"manifests are larger than {MAX_MANIFEST_BYTES // 1024} KiB")
    try:
        docs = load_documents(text, source="manifests", stored=stored)
    except DocumentError as exc:
        raise ValidationError(str(exc)) from exc
    if len(docs) > MAX_MANIFESTS:
        raise ValidationError(f"at most {MAX_MANIFESTS} manifests per SyncResource, got {len(docs)}")
    problems: list[str] = []
    seen: dict[tuple[str, str, str, str], int] = {}
    for number, doc in enumerate(docs, start=1):
        where = f"manifest {number}"
        for field in ("apiVersion", "kind"):
            if not isinstance(doc.get(field), str) or not doc[field]:
                problems.append(f"{where}: {field} is missing or not a string")
        metadata = doc.get("metadata")
        if (
            not isinstance(metadata, dict)
            or not isinstance(metadata.get("name"), str)
            or not metadata["name"]
        ):
            problems.append(f"{where}: metadata.name is missing or not a string")
            continue
        if "namespace" in metadata and not isinstance(metadata["namespace"], str):
            problems.append(f"{where}: metadata.namespace is not a string")
            continue
        if any(p.startswith(f"{where}:") for p in problems):
            continue
        identity = manifest_identity(doc)
        if identity in seen:
            problems.append(f"{where}: {doc['kind']} {metadata['name']!r} repeats manifest {seen[identity]}")
        seen.setdefault(identity, number)
    if problems:
        raise ValidationError(problems)
    return docs


def validate_manifests(text: str) -> None:
    parse_manifests(text)


class SyncResource(NamespacedResourceModel):
    """Manifests a module manager hands back for one Kyma, synced into its runtime.

    ``manifest_status`` records, per manifest, whether it was applied, the content hash that was
    applied (so an unchanged manifest is not written again) and when. Manifests removed from the
    list are pruned from the runtime unless the deletion policy is Orphan.
    """

    kyma = models.ForeignKey("controlplane.Kyma", on_delete=models.CASCADE, related_name="sync_resources")
    module = models.ForeignKey("controlplane.Module", on_delete=models.CASCADE, related_name="sync_resources")
    manifests = models.TextField(validators=[validate_manifests], help_text="Multi-document YAML.")
    apply_strategy = models.CharField(
        max_length=16, choices=ApplyStrategy.choices, default=ApplyStrategy.SERVER_SIDE_APPLY
    )
    deletion_policy = models.CharField(
        max_length=8, choices=DeletionPolicy.choices, default=DeletionPolicy.DELETE
    )
    manifest_status = models.JSONField(default=list, blank=True, editable=False)
    observed_generation = models.BigIntegerField(default=0, editable=False)

    SPEC_FIELDS: ClassVar[tuple[str, ...]] = ("manifests", "apply_strategy", "deletion_policy")
    # Manifests may hold Secrets: the audit trail records them by size and digest only.
    AUDIT_OPAQUE: ClassVar[tuple[str, ...]] = ("manifests",)

    class Meta:
        verbose_name = "sync resource"
        constraints = [
            models.UniqueConstraint(
                fields=["kyma", "module", "name"], name="syncresource_unique_kyma_module_name"
            )
        ]
        ordering = ["namespace", "name"]

    def clean(self) -> None:
        """The module's manifest policy: each refused manifest is named ``manifests[i]``."""
        if self.module_id is None:
            return
        try:
            docs = self.parsed_manifests()
        except ValidationError:
            return  # the field's own validator reports it
        refusals = self.module.manifest_policy.check(docs)
        if refusals:
            raise ValidationError({"manifests": [f"manifests[{r.index}]: {r.reason}" for r in refusals]})

    def parsed_manifests(self, *, stored: bool = False) -> list[dict[str, Any]]:
        """The manifests as objects; ``stored``: as read from the database (validated on save)."""
        return parse_manifests(self.manifests, stored=stored)

    @property
    def state(self) -> str:
        states = {entry.get("state") for entry in self.manifest_status}
        if ManifestState.FAILED in states:
            return ManifestState.FAILED
        if not self.manifest_status or ManifestState.PENDING in states:
            return ManifestState.PENDING
        return ManifestState.APPLIED
