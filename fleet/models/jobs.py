"""Jobs: background work a user started and wants to follow (NetBox's "a job has a row").

A bulk reconcile of thousands of Kymas or a CA rotation takes longer than a page load. The admin
creates a Job, a worker does the work in batches and writes its progress here, and the job's
admin page shows status, progress and the end state. The row also answers "who did what, when".
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

LOG_MAX_LINES = 200
LOG_MAX_CHARS = 32 * 1024
MESSAGE_MAX_CHARS = 500


class JobKind(models.TextChoices):
    RECONCILE = "reconcile", "Reconcile Kymas"
    CA_ROTATE = "ca-rotate", "Rotate the CA"


class JobStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    RUNNING = "running", "Running"
    COMPLETED = "completed", "Completed"
    FAILED = "failed", "Failed"


FINISHED = (JobStatus.COMPLETED, JobStatus.FAILED)


class Job(models.Model):
    """One piece of long work: what it targets, how far it got, and how it ended.

    ``targets`` holds what the job works on (``{"kyma_ids": [...]}`` for a reconcile), fixed when
    the job is created so the work does not drift with later changes. ``done`` counts processed
    targets out of ``total``; ``result`` holds the job's figures (queued, skipped, ...). ``log``
    keeps the last lines only (``LOG_MAX_LINES``), so a row stays small whatever the job did.
    ``lease_until`` is held by the worker running a slice of the job, so one job never runs twice
    at once and a job whose worker died is picked up again once the lease has run out.
    """

    kind = models.CharField(max_length=16, choices=JobKind.choices)
    status = models.CharField(max_length=16, choices=JobStatus.choices, default=JobStatus.PENDING)
    targets = models.JSONField(default=dict, blank=True)
    total = models.PositiveIntegerField(default=0)
    done = models.PositiveIntegerField(default=0)
    result = models.JSONField(default=dict, blank=True)
    message = models.CharField(max_length=MESSAGE_MAX_CHARS, blank=True)
    log = models.TextField(blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    lease_until = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["status", "-created_at"], name="job_status_recent"),
            models.Index(fields=["-created_at"], name="job_recent"),
        ]

    def __str__(self) -> str:
        return f"Job {self.pk} ({self.get_kind_display()}, {self.status})"

    @property
    def is_finished(self) -> bool:
        return self.status in FINISHED

    @property
    def percent(self) -> int | None:
        """Progress in percent; None while the amount of work is not known yet."""
        if self.status == JobStatus.COMPLETED:
            return 100
        if not self.total:
            return None
        return min(100, self.done * 100 // self.total)

    @property
    def duration(self) -> float | None:
        if self.started_at is None:
            return None
        end = self.finished_at or timezone.now()
        return (end - self.started_at).total_seconds()
