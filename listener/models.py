"""A bounded record of recent WatchEvents per Kyma, for people looking at a runtime."""

from __future__ import annotations

from django.db import models


class EventOutcome(models.TextChoices):
    QUEUED = "queued", "Reconcile queued"
    COALESCED = "coalesced", "Covered by a queued reconcile"
    FORWARDED = "forwarded", "Forwarded to the component"
    FORWARD_FAILED = "forward-failed", "Forwarding failed"


class WatchEventRecord(models.Model):
    """Accepted WatchEvents. Written in batches off the request path, identical events of one
    batch merged into one row (``count``, ``received_at`` = the last of them), and pruned to the
    most recent ``LISTENER_EVENTS_KEPT`` rows per Kyma, so it stays cheap at fleet scale."""

    kyma = models.ForeignKey("controlplane.Kyma", on_delete=models.CASCADE, related_name="watch_events")
    received_at = models.DateTimeField()
    component = models.CharField(max_length=63)
    contract = models.CharField(max_length=4)
    watched_namespace = models.CharField(max_length=253, blank=True)
    watched_name = models.CharField(max_length=253, blank=True)
    gvk_group = models.CharField("group", max_length=253, blank=True)
    gvk_version = models.CharField("version", max_length=63, blank=True)
    gvk_kind = models.CharField("kind", max_length=63, blank=True)
    outcome = models.CharField(max_length=16, choices=EventOutcome.choices)
    count = models.PositiveIntegerField(default=1)

    class Meta:
        verbose_name = "watch event"
        ordering = ["-received_at"]
        indexes = [
            models.Index(fields=["kyma", "-received_at"], name="watchevent_kyma_recent"),
            models.Index(fields=["received_at"], name="watchevent_received"),
        ]

    def __str__(self) -> str:
        return f"{self.component} {self.watched_namespace}/{self.watched_name} at {self.received_at:%H:%M:%S}"

    @property
    def gvk(self) -> str:
        group = f"{self.gvk_group}/" if self.gvk_group else ""
        return f"{group}{self.gvk_version}, Kind={self.gvk_kind}"
