"""Scheduled PKI work (Celery beat), and the gateway's Secret kept current (workers)."""

from __future__ import annotations

import logging

from celery import Task, shared_task
from celery import current_app as celery_app
from celery.signals import worker_ready
from django.conf import settings
from kombu.exceptions import OperationalError as KombuOperationalError

from fleet import queue
from fleet.k8s.client import Temporary

from . import gateway, maintenance
from .gateway import GATEWAY_TASK, gateway_secret_sync_request
from .models import GatewaySecretState

log = logging.getLogger(__name__)


@shared_task(name="pki.maintain", acks_late=True, ignore_result=True)
def pki_maintain() -> None:
    """Bootstrap/rotate the CA, renew due certificates, and push renewed ones to their runtimes."""
    report = maintenance.pki_maintain()
    if report.renewed_kymas:
        queue.request(report.renewed_kymas, reason="certificate renewed")
    if report.ca_created or report.ca_rotated or _gateway_behind(report.listener_certificate):
        gateway_secret_sync_request()
    if report.ca_created or report.ca_rotated or report.renewed_kymas:
        log.info(
            "PKI maintenance: CA created=%s rotated=%s, %d certificate(s) renewed",
            report.ca_created,
            report.ca_rotated,
            len(report.renewed_kymas),
        )


def _gateway_behind(listener_fingerprint: str) -> bool:
    """Whether the gateway's Secret, as last recorded, holds another server certificate."""
    if not settings.GATEWAY_SECRET_SYNC:
        return False
    held = GatewaySecretState.objects.filter(
        namespace=settings.GATEWAY_SECRET_NAMESPACE, name=settings.GATEWAY_SECRET_NAME
    ).values_list("certificate_fingerprint", flat=True)
    return list(held) != [listener_fingerprint]


@shared_task(name=GATEWAY_TASK, bind=True, acks_late=True, ignore_result=True, max_retries=None)
def gateway_secret_sync(self: Task) -> None:
    """The gateway's Secret holds the current credential (:mod:`pki.gateway`); an unreachable
    API server is tried again after ``GATEWAY_SECRET_RETRY`` seconds, as upstream requeues."""
    try:
        gateway.gateway_secret_sync()
    except Temporary as exc:
        log.warning(
            "the gateway's Secret could not be written (%s); again in %ss", exc, settings.GATEWAY_SECRET_RETRY
        )
        raise self.retry(countdown=settings.GATEWAY_SECRET_RETRY) from exc


@worker_ready.connect
def gateway_secret_sync_at_start(**_: object) -> None:
    """A worker that starts makes sure the gateway's Secret is current, as upstream's controller
    reconciles it when it starts: a new installation gets it within seconds, not after the
    first ``GATEWAY_SECRET_INTERVAL``."""
    if settings.GATEWAY_SECRET_SYNC:
        try:
            celery_app.send_task(GATEWAY_TASK, retry=True)
        except (KombuOperationalError, OSError) as exc:
            log.warning("gateway Secret sync not queued at start (the periodic one will do it): %s", exc)
