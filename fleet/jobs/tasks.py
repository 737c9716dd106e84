"""Celery tasks of jobs: thin, id-based, explicitly named (they are an API)."""

from __future__ import annotations

from celery import shared_task

from . import services


@shared_task(name="jobs.run", acks_late=True, ignore_result=True)
def job_run(job_id: int) -> None:
    """Run one slice of a job (see :mod:`fleet.jobs.services`) and queue the next one."""
    again_in = services.job_run(job_id=job_id, budget_seconds=services.SLICE_SECONDS)
    if again_in is not None:
        services.job_enqueue(job_id, countdown=again_in)
