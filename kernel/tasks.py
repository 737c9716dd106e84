"""Celery tasks of the kernel: thin and explicitly named (they are an API)."""

from __future__ import annotations

import logging

from celery import shared_task
from django.conf import settings

from kernel.audit import audit_prune as audit_entries_prune
from kernel.audit import kept_since

log = logging.getLogger(__name__)


@shared_task(name="kernel.audit_prune", acks_late=True, ignore_result=True)
def audit_prune() -> int:
    """Beat, hourly: drop audit entries older than ``AUDIT_KEPT_DAYS`` (in batches)."""
    pruned = audit_entries_prune(older_than=kept_since(settings.AUDIT_KEPT_DAYS))
    if pruned:
        log.info(
            "audit: %d entr%s older than %g days pruned",
            pruned,
            "y" if pruned == 1 else "ies",
            settings.AUDIT_KEPT_DAYS,
        )
    return pruned
