"""What a reconcile job really achieved: its Kymas were queued first, then reconciled (or not).

A reconcile job ends "completed" once every Kyma has a reconcile queued; the reconciles run after
it. Their outcome is read back from the reconcile records written since the job started: per
Kyma the newest one counts (Error: failed, any other state: OK); Kymas with none yet are pending.
"""

from __future__ import annotations

from dataclasses import dataclass

from fleet.models import Job, JobKind, JobStatus, Kyma, KymaState, ReconcileRecord

CHUNK = 500  # ids per query (SQLite's bound on parameters, and short statements on PostgreSQL)
NAMES_SHOWN = 20


@dataclass(frozen=True)
class ReconcileOutcome:
    targets: int
    queued: int  # requests the job made (or found already queued)
    gone: int
    ok: int
    failed: int
    failed_ids: tuple[int, ...] = ()

    @property
    def reconciled(self) -> int:
        return self.ok + self.failed

    @property
    def pending(self) -> int:
        return max(0, self.targets - self.gone - self.reconciled)

    @property
    def summary(self) -> str:
        """ "queued 5 of 5; reconciled 3 OK, 1 failed; 1 pending" — what an operator asks first."""
        parts = [f"queued {self.queued} of {self.targets}"]
        if self.reconciled:
            parts.append(f"reconciled {self.ok} OK, {self.failed} failed")
        if self.pending:
            parts.append(f"{self.pending} not reconciled yet")
        if self.gone:
            parts.append(f"{self.gone} no longer exist")
        return "; ".join(parts)

    @property
    def state(self) -> str:
        """A Kyma state for the badge: Processing while pending, Error/Warning if any failed."""
        if self.pending:
            return KymaState.PROCESSING
        if self.failed:
            return KymaState.ERROR if not self.ok else KymaState.WARNING
        return KymaState.READY

    @property
    def label(self) -> str:
        if self.pending:
            return (
                "Queued"
                if not self.reconciled
                else f"Reconciling ({self.reconciled}/{self.targets - self.gone})"
            )
        if self.failed:
            return f"{self.failed} failed"
        return "Reconciled OK"


def reconcile_outcome(job: Job) -> ReconcileOutcome | None:
    """The outcome of a finished reconcile job's reconciles; None for other jobs or before the
    queueing finished (the job's own progress says how far that got)."""
    if job.kind != JobKind.RECONCILE or job.status != JobStatus.COMPLETED:
        return None
    ids: list[int] = list(job.targets.get("kyma_ids", []))
    since = job.started_at or job.created_at
    latest: dict[int, str] = {}
    for start in range(0, len(ids), CHUNK):
        rows = (
            ReconcileRecord.objects.filter(kyma_id__in=ids[start : start + CHUNK], started_at__gte=since)
            .order_by("kyma_id", "-started_at")
            .values_list("kyma_id", "state")
        )
        for kyma_id, state in rows:
            latest.setdefault(kyma_id, state)
    failed = tuple(kyma_id for kyma_id, state in latest.items() if state == KymaState.ERROR)
    result = job.result or {}
    return ReconcileOutcome(
        targets=len(ids),
        queued=int(result.get("queued", 0)) + int(result.get("covered", 0)),
        gone=int(result.get("gone", 0)),
        ok=len(latest) - len(failed),
        failed=len(failed),
        failed_ids=failed,
    )


def kyma_names(ids: list[int], limit: int = NAMES_SHOWN) -> list[tuple[int, str]]:
    """``(id, "namespace/name")`` of the first ``limit`` ids that still exist, in their order."""
    found = {
        pk: f"{ns}/{name}"
        for pk, ns, name in Kyma.objects.filter(pk__in=ids[:limit]).values_list("pk", "namespace", "name")
    }
    return [(pk, found[pk]) for pk in ids[:limit] if pk in found]
