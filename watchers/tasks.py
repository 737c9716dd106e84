"""Scheduled work of Watchers."""

from __future__ import annotations

import logging

from celery import shared_task

from .services import watchers_finalize
from .status import watchers_status_refresh

log = logging.getLogger(__name__)


@shared_task(name="watchers.finalize", acks_late=True, ignore_result=True)
def finalize() -> int:
    """Delete Watchers in Deleting that no runtime's webhook configuration uses any more."""
    return len(watchers_finalize())


@shared_task(name="watchers.status_refresh", acks_late=True, ignore_result=True)
def status_refresh() -> int:
    """Recompute every Watcher's status from what the runtimes' reconciles recorded."""
    return watchers_status_refresh()
