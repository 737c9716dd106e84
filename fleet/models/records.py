"""What reconciles did, for the Kyma timeline and the dashboard (bounded per Kyma).

A record says why the reconcile ran (``reason``, from the request that queued it) and what it
changed (``changes``): a list of small JSON objects, each with a ``kind`` and the details of that
kind. Known kinds (below) read as sentences; any other kind is shown all the same (its ``text``,
else its fields), so a new step of the reconciler can add entries without touching the pages.
"""

from __future__ import annotations

from typing import Any

from django.db import models

CHANGES_KEPT = 50  # per record: a reconcile that touched more says how many it left out

# Request reasons (see ``fleet.queue.request``) by what an operator asks: why did this run?
REASON_LABELS = {
    "watch-event": "event from the runtime",
    "periodic": "periodic",
    "watcher-silent": "periodic (runtime watcher silent)",
    "requested by a user": "user request",
    "spec changed": "spec changed in the control plane",
    "kubeconfig changed": "kubeconfig changed",
    "deletion": "deletion",
    "module status reported": "module manager reported a status",
}


def reason_label(reason: str) -> str:
    """``watch-event`` → "event from the runtime"; a job's reconcile is a user request too."""
    if reason.startswith("job "):
        return f"user request ({reason})"
    return REASON_LABELS.get(reason, reason or "unknown")


def _value(value: Any) -> str:
    if value is None or value == "" or value == []:
        return "∅"
    if isinstance(value, list | dict):
        return ", ".join(map(str, value)) if isinstance(value, list) else str(value)
    return str(value)


def describe_drift(entry: dict[str, Any]) -> str:
    """A corrected object as ``Deployment kyma-system/skr-webhook``."""
    where = "/".join(part for part in (entry.get("namespace"), entry.get("name")) if part)
    return f"{entry.get('kind')} {where}"


def describe_change(change: dict[str, Any]) -> str:
    """One change as a sentence: ``channel regular → fast``, ``module keda added``, ..."""
    kind = change.get("kind", "")
    where = f" ({change['source']})" if change.get("source") else ""
    if kind == "spec":
        return f"{change.get('field')} {_value(change.get('before'))} → {_value(change.get('after'))}{where}"
    if kind in ("module-added", "module-removed"):
        return f"module {change.get('module')} {kind.removeprefix('module-')}{where}"
    if kind == "module-state":
        return (
            f"module {change.get('module')}: {_value(change.get('before'))} → {_value(change.get('after'))}"
        )
    if kind in ("applied", "removed"):
        action = change.get("action") or kind
        return f"{change.get('resource')} {action}"
    if change.get("text"):
        return str(change["text"])
    details = ", ".join(f"{key}={_value(value)}" for key, value in change.items() if key != "kind")
    return f"{kind}: {details}" if details else kind or "change"


class ReconcileRecord(models.Model):
    """One finished reconcile: when it started, why, how long it took, what state it left and what
    it changed."""

    kyma = models.ForeignKey("controlplane.Kyma", on_delete=models.CASCADE, related_name="reconciles")
    started_at = models.DateTimeField()
    duration_ms = models.PositiveIntegerField()
    state = models.CharField(max_length=16, blank=True)
    runtime_writes = models.PositiveIntegerField(default=0)
    message = models.TextField(blank=True)
    reason = models.CharField(max_length=100, blank=True)
    changes = models.JSONField(default=list, blank=True)
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

    @property
    def reason_text(self) -> str:
        return reason_label(self.reason)

    def change_lines(self) -> list[str]:
        drift = [f"drift corrected: {describe_drift(entry)}" for entry in self.drift_corrected or ()]
        return drift + [describe_change(change) for change in self.changes or () if isinstance(change, dict)]


class DriftCount(models.Model):
    """Drift corrections so far, by kind: ``controlplane_drift_corrected_total{kind}`` is read from
    here at scrape time, so it is right whichever process answers and survives worker restarts."""

    kind = models.CharField(max_length=63, primary_key=True)
    total = models.PositiveBigIntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.kind}: {self.total}"


# FleetCounter names: what reconciles count, exported by ``fleet.metrics``.
THROTTLED_REQUESTS = "runtime-requests-throttled"  # waited for their runtime client's rate limit
THROTTLED_MILLISECONDS = "runtime-throttled-milliseconds"  # how long they waited in all
PURGES = "kyma-purges"  # Kyma deletions that purged what a finalizer held in the runtime


class FleetCounter(models.Model):
    """A fleet-wide counter that only grows (purges, runtime requests that waited for their rate
    limit): ``fleet.metrics`` exports each at scrape time under its ``name`` (a metric name), so
    it is right whichever process answers and survives restarts. ``label`` tells series apart."""

    name = models.CharField(max_length=100)
    label = models.CharField(max_length=100, blank=True)
    total = models.PositiveBigIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["name", "label"], name="fleet_counter_series")]

    def __str__(self) -> str:
        return f"{self.name}{{{self.label}}}: {self.total}" if self.label else f"{self.name}: {self.total}"
