"""Scheduled work of Watchers."""

from __future__ import annotations

import logging

from celery import shared_task

from .services import watchers_finalize

log = logging.getLogger(__name__)


@shared_task(name="watchers.finalize", acks_late=True, ignore_result=True)
def finalize() -> int:
    """Delete Watchers in Deleting that no runtime's webhook configuration uses any more."""
    return len(watchers_finalize())
