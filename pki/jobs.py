"""The CA rotation job: one service for the admin, ``manage.py pki rotate-ca`` and beat.

The rotation itself is one short transaction (a new CA joins the bundle and the old
certificates become due), done when the job is created, so whoever started it sees the new CA at
once and an error on the spot. Re-issuing thousands of runtime certificates, and queueing the
reconciles that carry them to the runtimes, is the long part: that is the job, with a progress page.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

from django.db import IntegrityError, transaction
from django.db.models import QuerySet

from fleet import queue
from fleet.jobs.services import User, check_time, job_create, job_progress, log_append, register_runner
from fleet.models import Job, JobKind, Kyma

from . import services as pki
from .gateway import gateway_secret_sync_request
from .models import Certificate, CertificatePurpose

CERTIFICATE_BATCH = 200


def ca_rotation_start(*, user: User = None, now: dt.datetime | None = None) -> Job:
    """Rotate the CA now, and re-issue every runtime certificate of older CAs in a job."""
    with transaction.atomic():
        ca = pki.ca_rotate(now=now)
        job = job_create(
            kind=JobKind.CA_ROTATE,
            targets={"certificates": "runtime certificates of older CAs"},
            total=_older_certificates(ca.pk, after=0).count(),
            user=user,
        )
        job.result = {
            "ca_id": ca.pk,
            "ca": ca.fingerprint,
            "cursor": 0,
            "reissued": 0,
            "skipped": 0,
            "queued": 0,
        }
        job.log = log_append(
            "",
            f"new CA {ca.fingerprint[:23]}… joined the bundle; "
            f"the listener switches to it at {ca.serving_from:%Y-%m-%d %H:%M} UTC",
        )
        job.save(update_fields=["result", "log"])
        # The gateway trusts the new CA as soon as possible: runtimes get certificates of it next.
        gateway_secret_sync_request()
    return job


def _older_certificates(ca_id: int, *, after: int) -> QuerySet:
    """Kymas (ids, in order, past ``after``) whose current runtime certificate is not from the CA."""
    return (
        Certificate.objects.filter(
            purpose=CertificatePurpose.RUNTIME, superseded_at__isnull=True, kyma_id__gt=after
        )
        .exclude(issuer_id=ca_id)
        .order_by("kyma_id")
        .values_list("kyma_id", flat=True)
    )


def _run_ca_rotate(job: Job, deadline: float | None) -> None:
    """Re-issue the runtime certificates of older CAs in batches, in Kyma id order (a resumed job
    continues after ``result["cursor"]``), and queue the reconciles that deliver them."""
    result = job.result
    while True:
        check_time(deadline)
        kyma_ids = list(_older_certificates(result["ca_id"], after=result["cursor"])[:CERTIFICATE_BATCH])
        if not kyma_ids:
            break
        kymas = list(Kyma.objects.filter(pk__in=kyma_ids))
        issued = _retry_on_conflict(lambda kymas=kymas: pki.certificates_issue_bulk(kymas=kymas))
        queued = queue.request([kyma.pk for kyma in kymas], reason="CA rotated")
        result["cursor"] = kyma_ids[-1]
        result["reissued"] += issued
        result["skipped"] += len(kyma_ids) - issued
        result["queued"] += len(queued)
        job_progress(
            job,
            done=job.done + len(kyma_ids),
            line=f"{issued} certificate(s) re-issued, {len(kyma_ids) - issued} skipped, "
            f"{len(queued)} reconcile(s) queued",
        )
    job.message = (
        f"CA {result['ca'][:23]}… issues from now on; {result['reissued']} runtime certificate(s) re-issued"
        + (f", {result['skipped']} skipped (Kyma without SKR domain)" if result["skipped"] else "")
        + "; runtimes receive them with their next reconcile."
    )


def _retry_on_conflict(issue: Callable[[], int], attempts: int = 3) -> int:
    """A reconcile may renew one of the batch's certificates at the same moment (the database's
    one-current-certificate rule refuses the second): do the batch again."""
    for attempt in range(attempts):
        try:
            return issue()
        except IntegrityError:
            if attempt == attempts - 1:
                raise
    return 0


def register() -> None:
    """Called by the app's ``ready()``: the jobs' worker runs CA rotations with this runner."""
    register_runner(JobKind.CA_ROTATE, _run_ca_rotate)
