"""What reconciles did, for the Kyma timeline and the dashboard (bounded per Kyma)."""

from __future__ import annotations

from django.db import models


class ReconcileRecord(models.Model):
    """One finished reconcile: when it started, how long it took, what state it left."""

    kyma = models.ForeignKey("controlplane.Kyma", on_delete=models.CASCADE, related_name="reconciles")
    started_at = models.DateTimeField()
    duration_ms = models.PositiveIntegerField()
    state = models.CharField(max_length=16, blank=True)
    runtime_writes = models.PositiveIntegerField(default=0)
    message = models.TextField(blank=True)
    # Objects found changed in the runtime and applied again: [{kind, namespace, name}, ...]
    drift_corrected = models.JSONField(default=list, blank=True)

    class Meta:
        ordering = ["-started_at"]
        indexes = [
            models.Index(fields=["kyma", "-started_at"], name="reconcile_kyma_recent"),
            models.Index(fields=["started_at"], name="reconcile_started"),
        ]

    def __str__(self) -> str:
        return f"{self.kyma_id} {self.state or '-'} at {self.started_at:%H:%M:%S} ({self.duration_ms} ms)"


class DriftCount(models.Model):
    """Drift corrections so far, by kind: ``controlplane_drift_corrected_total{kind}`` is read from
    here at scrape time, so it is right whichever process answers and survives worker restarts."""

    kind = models.CharField(max_length=63, primary_key=True)
    total = models.PositiveBigIntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.kind}: {self.total}"
