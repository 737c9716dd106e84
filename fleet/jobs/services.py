"""Jobs: start long work, run it in batches with progress, end in a state a person can read.

A job runs in *slices*: a worker claims the job (a lease on the row, so one job never runs twice
at once), processes batches until its time budget is spent, records progress after every batch,
releases the lease and queues the next slice. Short tasks keep the broker's redelivery and the
worker's prefetch sane; a job whose worker died is picked up again when its lease runs out, and
resumes where its progress says (the work of both kinds is idempotent per batch).
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from celery import current_app
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import transaction
from django.db.models import Q
from django.db.models.functions import Coalesce
from django.utils import timezone
from kombu.exceptions import OperationalError as KombuOperationalError

from fleet import queue
from fleet.models import Job, JobKind, JobStatus, Kyma
from fleet.models.jobs import LOG_MAX_CHARS, LOG_MAX_LINES, MESSAGE_MAX_CHARS
from kernel import audit
from kernel.errors import ApplicationError, ValidationFailed

log = logging.getLogger(__name__)

RECONCILE_BATCH = 500
# A reconcile-now of more Kymas than this becomes a job (admin and API alike).
RECONCILE_JOB_THRESHOLD = 200
SLICE_SECONDS = 20.0
LEASE = dt.timedelta(seconds=120)
# Published by its stable name (the task module imports this one).
JOB_TASK = "jobs.run"

User = AbstractBaseUser | AnonymousUser | None


# --- creating jobs --------------------------------------------------------------------------------


def job_reconcile_kymas(*, kyma_ids: Sequence[int], user: User) -> Job:
    """Request a reconcile of many Kymas in the background; the job records how it went."""
    ids = list(dict.fromkeys(int(kyma_id) for kyma_id in kyma_ids))
    if not ids:
        raise ValidationFailed("no Kymas to reconcile")
    return job_create(kind=JobKind.RECONCILE, targets={"kyma_ids": ids}, total=len(ids), user=user)


@dataclass(frozen=True)
class ReconcileNow:
    """What "reconcile now" did: Kymas queued at once (``covered``: already had one queued), or
    the job that queues a large selection in batches with a progress page."""

    queued: list[int]
    covered: int
    job: Job | None = None


def kymas_reconcile_now(*, kyma_ids: Sequence[int], user: User) -> ReconcileNow:
    """Reconcile now, for a selection, from the admin and the API alike: up to
    ``RECONCILE_JOB_THRESHOLD`` Kymas are queued at once, a larger selection becomes a job."""
    ids = list(dict.fromkeys(int(kyma_id) for kyma_id in kyma_ids))
    if len(ids) > RECONCILE_JOB_THRESHOLD:
        job = job_reconcile_kymas(kyma_ids=ids, user=user)
        audit.record(action="reconcile", kind="Job", name=str(job.pk), changes=[_selected(ids)])
        return ReconcileNow(queued=[], covered=0, job=job)
    queued = queue.request(ids, reason="requested by a user")
    if audit.current_actor() is not None:
        for kyma in Kyma.objects.filter(pk__in=ids).only("pk", "uid", "namespace", "name"):
            audit.record_object(kyma, action="reconcile")
    return ReconcileNow(queued=queued, covered=len(ids) - len(queued))


def _selected(ids: list[int]) -> dict[str, object]:
    return {"field": "kymas", "before": None, "after": f"{len(ids):,} Kymas"}


def job_create(*, kind: str, targets: dict, total: int, user: User) -> Job:
    creator = user if user is not None and user.is_authenticated else None
    with transaction.atomic():
        job = Job.objects.create(kind=kind, targets=targets, total=total, created_by=creator)
        transaction.on_commit(lambda: job_enqueue(job.pk))
    return job


def job_enqueue(job_id: int, *, countdown: float = 0) -> None:
    """Queue (a slice of) the job; a broker that refuses the message fails the job visibly."""
    options = {"countdown": countdown} if countdown > 0 else {}
    try:
        current_app.send_task(JOB_TASK, args=[job_id], retry=True, **options)
    except (KombuOperationalError, OSError) as exc:
        log.warning("job %s not queued: %s", job_id, exc)
        Job.objects.filter(pk=job_id).exclude(status__in=[JobStatus.COMPLETED, JobStatus.FAILED]).update(
            status=JobStatus.FAILED,
            message=_short(f"the task queue is unavailable: {exc}"),
            finished_at=timezone.now(),
            lease_until=None,
        )


# --- running jobs ----------------------------------------------------------------------------------


class _OutOfTime(Exception):
    """The slice's time budget is spent; the job continues in the next slice."""


def job_run(*, job_id: int, budget_seconds: float | None = None) -> float | None:
    """Run one slice of a job. Returns in how many seconds the next slice should run, or None
    when there is nothing more to do (finished, failed, gone)."""
    now = timezone.now()
    claimed = (
        Job.objects.filter(pk=job_id, status__in=[JobStatus.PENDING, JobStatus.RUNNING])
        .filter(Q(lease_until__isnull=True) | Q(lease_until__lte=now))
        .update(status=JobStatus.RUNNING, lease_until=now + LEASE, started_at=Coalesce("started_at", now))
    )
    if not claimed:
        leased = Job.objects.filter(pk=job_id, status=JobStatus.RUNNING).values_list("lease_until", flat=True)
        until = next(iter(leased), None)
        # Another worker runs it (or died holding it): look again when that lease runs out.
        return max(1.0, (until - now).total_seconds()) if until else None
    job = Job.objects.get(pk=job_id)
    deadline = time.monotonic() + budget_seconds if budget_seconds is not None else None
    try:
        RUNNERS[job.kind](job, deadline)
    except _OutOfTime:
        Job.objects.filter(pk=job.pk).update(lease_until=None)
        return 0.0
    except ApplicationError as exc:
        job_fail(job, exc.message)
        return None
    except Exception as exc:  # a bug must still end the job visibly, not leave it "running"
        log.exception("job %s failed", job.pk)
        job_fail(job, f"unexpected error: {exc.__class__.__name__}: {exc}")
        return None
    job_complete(job)
    return None


def job_progress(job: Job, *, done: int | None = None, total: int | None = None, line: str = "") -> None:
    """Record progress (and extend the lease: a job that reports is alive)."""
    if done is not None:
        job.done = done
    if total is not None:
        job.total = total
    if line:
        job.log = log_append(job.log, line)
    Job.objects.filter(pk=job.pk).update(
        done=job.done, total=job.total, result=job.result, log=job.log, lease_until=timezone.now() + LEASE
    )


def job_complete(job: Job) -> None:
    _finish(job, JobStatus.COMPLETED, job.message or "done")


def job_fail(job: Job, message: str) -> None:
    job.log = log_append(job.log, f"failed: {message}")
    _finish(job, JobStatus.FAILED, message)


def _finish(job: Job, status: str, message: str) -> None:
    job.status, job.message, job.finished_at = status, _short(message), timezone.now()
    Job.objects.filter(pk=job.pk).update(
        status=job.status,
        message=job.message,
        finished_at=job.finished_at,
        done=job.done,
        total=job.total,
        result=job.result,
        log=job.log,
        lease_until=None,
    )


def log_append(text: str, line: str) -> str:
    """The log with one more line, keeping the newest ``LOG_MAX_LINES`` within ``LOG_MAX_CHARS``."""
    lines = [*text.splitlines(), f"{timezone.now():%H:%M:%S} {line}"][-LOG_MAX_LINES:]
    joined = "\n".join(lines)
    return joined[-LOG_MAX_CHARS:]


def _short(message: str) -> str:
    return message if len(message) <= MESSAGE_MAX_CHARS else message[: MESSAGE_MAX_CHARS - 1] + "…"


def check_time(deadline: float | None) -> None:
    if deadline is not None and time.monotonic() >= deadline:
        raise _OutOfTime


# --- the kinds of work -----------------------------------------------------------------------------


def _run_reconcile(job: Job, deadline: float | None) -> None:
    """Request reconciles batch by batch, through the same coalescing service as the API."""
    ids: list[int] = job.targets.get("kyma_ids", [])
    job.result = {"queued": 0, "covered": 0, "gone": 0, **job.result}
    while job.done < len(ids):
        check_time(deadline)
        batch = ids[job.done : job.done + RECONCILE_BATCH]
        present = set(Kyma.objects.filter(pk__in=batch).values_list("pk", flat=True))
        wanted = [kyma_id for kyma_id in batch if kyma_id in present]
        queued = queue.request(wanted, reason=f"job {job.pk}") if wanted else []
        job.result["queued"] += len(queued)
        job.result["covered"] += len(wanted) - len(queued)
        job.result["gone"] += len(batch) - len(wanted)
        job_progress(
            job,
            done=job.done + len(batch),
            line=f"{len(batch)} Kyma(s): {len(queued)} queued, {len(wanted) - len(queued)} already queued, "
            f"{len(batch) - len(wanted)} gone",
        )
    result = job.result
    job.message = (
        f"Reconcile queued for {result['queued']} Kyma(s); {result['covered']} already had one queued"
        + (f"; {result['gone']} no longer exist" if result["gone"] else "")
        + "."
    )


Runner = Callable[[Job, "float | None"], None]
RUNNERS: dict[str, Runner] = {}


def register_runner(kind: str, runner: Runner) -> None:
    """An app's kind of job (``kind`` from :class:`JobKind`): ``runner(job, deadline)`` does the
    work in batches, calls :func:`job_progress` after each and :func:`check_time` between them."""
    RUNNERS[kind] = runner


register_runner(JobKind.RECONCILE, _run_reconcile)
