"""How jobs and reconcile records read on the pages (the dashboard's and the admin's): a job's
badge and outcome, and the columns of the reconcile records' list, which the dashboard links to
sorted by one of them."""

from __future__ import annotations

from fleet.jobs.selectors import reconcile_outcome
from fleet.models import Job, JobStatus
from kernel.admin import state_badge

STATUS_STATES = {
    JobStatus.PENDING: "",
    JobStatus.RUNNING: "Processing",
    JobStatus.COMPLETED: "Ready",
    JobStatus.FAILED: "Error",
}
# The reconcile records' list, column by column; the admin's ``o`` parameter sorts by a position.
RECORD_COLUMNS = (
    "started_at",
    "kyma_column",
    "state_column",
    "duration_ms",
    "runtime_writes",
    "why",
    "what_changed",
    "message",
)
DURATION_COLUMN = RECORD_COLUMNS.index("duration_ms")


def job_status_badge(job: Job) -> str:
    """A reconcile job that queued everything says what became of the reconciles: "Queued" while
    they run, then "Reconciled OK" or how many failed (the job's own status is only the queueing)."""
    outcome = reconcile_outcome(job)
    if outcome is not None:
        return state_badge(outcome.state, outcome.label)
    return state_badge(STATUS_STATES.get(job.status, ""), job.get_status_display())


def job_outcome_text(job: Job) -> str:
    outcome = reconcile_outcome(job)
    if outcome is not None:
        return outcome.summary
    if job.result:
        return "; ".join(f"{key.replace('_', ' ')}: {value}" for key, value in job.result.items())
    return job.message or "—"
