"""Module managers' credentials: API keys that act for one module, not for a person."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from kernel.models import IssuedKey

# Module credential keys start with this marker (people's API tokens with ``kcp_``), so the
# authentication classes tell them apart without a database lookup.
MODULE_KEY_MARKER = "kcpm_"


class ModuleCredential(IssuedKey):
    """An API key of one module's manager (another team's code).

    It may read only its module's ModuleConfigs, report their status, and write only its module's
    SyncResources (whose manifests its module's policy bounds); everything else is refused with
    the reason. It belongs to the module, not to the person who created it, so a team's manager
    keeps working when that person leaves; ``created_by`` is kept for the record. Like every
    issued key it is stored as a digest, shown once, may expire and is revoked rather than
    deleted (the row says when)."""

    module = models.ForeignKey("controlplane.Module", on_delete=models.CASCADE, related_name="credentials")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        editable=False,
        related_name="+",
    )

    class Meta:
        verbose_name = "module credential"
        ordering = ("module", "name")
        constraints = (
            models.UniqueConstraint(
                fields=("module", "name"),
                name="modulecredential_unique_name_per_module",
                violation_error_message="This module already has a credential with this name.",
            ),
        )
