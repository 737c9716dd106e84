"""Forwarding events of other components to their Watcher's service (a worker does it).

Like upstream's per-Watcher VirtualService, the event goes to ``serviceInfo`` on the same path
(``/<contract>/<component>/event``) with the runtime's certificate in ``X-Forwarded-Client-Cert``,
so a component built on upstream's listener library identifies the runtime as usual.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import quote

import requests
from celery import Task, shared_task
from django.conf import settings
from django.utils import timezone
from kombu.exceptions import OperationalError as KombuOperationalError

from fleet.services.housekeeping import prune_per_kyma
from kernel.errors import QueueUnavailable

from .models import EventOutcome, WatchEventRecord

log = logging.getLogger(__name__)


class ForwardFailed(Exception):
    """The component answered with an error (retried with backoff)."""


def forward_url(service_info: dict, contract: str, component: str) -> str:
    base = settings.LISTENER_FORWARD_URL.format(**service_info).rstrip("/")
    return f"{base}/{contract}/{component}/event"


@shared_task(
    name="listener.forward_event",
    bind=True,
    acks_late=True,
    autoretry_for=(requests.RequestException, ForwardFailed),
    retry_backoff=1,
    retry_backoff_max=60,
    retry_jitter=True,
    max_retries=10,
)
def forward_event(self: Task, url: str, body: dict, certificate_pem: str, kyma_id: int, record: dict) -> int:
    headers = {"X-Forwarded-Client-Cert": f'Cert="{quote(certificate_pem, safe="")}"'}
    try:
        response = requests.post(url, json=body, headers=headers, timeout=settings.LISTENER_FORWARD_TIMEOUT)
    except requests.RequestException as exc:
        _give_up_if_last(self, kyma_id, record, f"{type(exc).__name__}: {exc}")
        raise
    if response.status_code != 200:
        _give_up_if_last(self, kyma_id, record, f"status {response.status_code}")
        raise ForwardFailed(f"{url} answered {response.status_code}")
    return response.status_code


def _give_up_if_last(task: Any, kyma_id: int, record: dict, reason: str) -> None:
    if task.request.retries >= task.max_retries:
        log.error(
            "giving up forwarding a WatchEvent to %s after %d tries: %s",
            record["component"],
            task.request.retries + 1,
            reason,
        )
        WatchEventRecord.objects.create(
            kyma_id=kyma_id, received_at=timezone.now(), outcome=EventOutcome.FORWARD_FAILED, **record
        )


def forward_event_publish(*, route: Any, event: Any, kyma: Any, identity: Any) -> None:
    """Queue the forward (the caller answers 200 only once this returned)."""
    record = {
        "component": event.component,
        "contract": event.contract,
        "watched_namespace": event.watched.namespace[:253],
        "watched_name": event.watched.name[:253],
        "gvk_group": event.group[:253],
        "gvk_version": event.version[:63],
        "gvk_kind": event.kind[:63],
    }
    try:
        forward_event.apply_async(
            args=[
                forward_url(route.service_info, event.contract, event.component),
                event.payload(),
                identity.certificate_pem,
                kyma.id,
                record,
            ],
            retry=True,
        )
    except (KombuOperationalError, OSError) as exc:
        raise QueueUnavailable(f"the task queue is unavailable: {exc}") from exc


@shared_task(name="listener.housekeeping", acks_late=True, ignore_result=True)
def housekeeping() -> None:
    """Bound the event records (the newest ``LISTENER_EVENTS_KEPT`` per Kyma stay)."""
    pruned = prune_per_kyma(WatchEventRecord, keep=settings.LISTENER_EVENTS_KEPT, order_field="received_at")
    if pruned:
        log.info("housekeeping: %d event record(s) pruned", pruned)
