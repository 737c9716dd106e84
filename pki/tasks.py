"""Scheduled PKI work (Celery beat)."""

from __future__ import annotations

import logging

from celery import shared_task

from fleet import queue

from . import maintenance

log = logging.getLogger(__name__)


@shared_task(name="pki.maintain", acks_late=True, ignore_result=True)
def pki_maintain() -> None:
    """Bootstrap/rotate the CA, renew due certificates, and push renewed ones to their runtimes."""
    report = maintenance.pki_maintain()
    if report.renewed_kymas:
        queue.request(report.renewed_kymas, reason="certificate renewed")
    if report.ca_created or report.ca_rotated or report.renewed_kymas:
        log.info(
            "PKI maintenance: CA created=%s rotated=%s, %d certificate(s) renewed",
            report.ca_created,
            report.ca_rotated,
            len(report.renewed_kymas),
        )
