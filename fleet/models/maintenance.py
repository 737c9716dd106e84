"""The fleet's maintenance-window policy, as the admin stores it (upstream's JSON shape).

Which runtime gets which window is upstream's rule (:mod:`kernel.documents.maintenance`); the policy
comes from this row when the admin has saved one, else from ``MAINTENANCE_POLICY_FILE`` (see
``fleet.maintenance``). Runtimes are matched by upstream's labels on their Kyma (an annotation of
the same name counts when the label is missing).
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.db import models

from kernel.documents.maintenance import PolicyError, Runtime, parse_policy

# Upstream's labels of a Kyma (lifecycle-manager's api/shared/operator_labels.go).
GLOBAL_ACCOUNT_LABEL = "kyma-project.io/global-account-id"
PLAN_LABEL = "kyma-project.io/broker-plan-name"
REGION_LABEL = "kyma-project.io/region"
PLATFORM_REGION_LABEL = "kyma-project.io/platform-region"


def validate_policy(value: Any) -> None:
    try:
        parse_policy(value)
    except PolicyError as exc:
        raise ValidationError(str(exc)) from exc


def runtime_attributes(labels: dict | None, annotations: dict | None) -> Runtime:
    """What a policy's rules match, from a Kyma's labels (or annotations of the same names)."""

    def value(key: str) -> str:
        found = (labels or {}).get(key) or (annotations or {}).get(key) or ""
        return found if isinstance(found, str) else ""

    return Runtime(
        global_account_id=value(GLOBAL_ACCOUNT_LABEL),
        plan=value(PLAN_LABEL),
        region=value(REGION_LABEL),
        platform_region=value(PLATFORM_REGION_LABEL),
    )


class MaintenancePolicy(models.Model):
    """The maintenance-window policy of the fleet: one row (its name is ``default``)."""

    name = models.CharField(max_length=63, unique=True, default="default", editable=False)
    policy = models.JSONField(
        validators=[validate_policy],
        help_text='Upstream\'s shape: {"rules": [{"match": {"plan": "trial|free"}, "windows": [{"days": '
        '["Sat"], "begin": "21:00:00+00:00", "end": "00:00:00+00:00"}]}], "default": {...}}',
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "maintenance-window policy"
        verbose_name_plural = "maintenance-window policy"

    def __str__(self) -> str:
        return f"maintenance-window policy ({self.name})"
