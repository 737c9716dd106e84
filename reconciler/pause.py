"""A paused Kyma (upstream's ``skip-reconciliation`` label): the reconcile leaves its runtime alone.

Like upstream, nothing is read from or written to the runtime and the status stays as it was; the
reconcile only says why it did nothing (its record, on the Kyma's page) and pushes the next
periodic reconcile out like a Ready Kyma's. A Kyma being deleted is cleaned up all the same.
"""

from __future__ import annotations

import datetime as dt

from django.conf import settings

from fleet.models import Kyma
from fleet.models.kyma import SKIP_RECONCILIATION_LABEL

from .context import ReconcileContext
from .status import Outcome

MESSAGE = (
    f'paused: label {SKIP_RECONCILIATION_LABEL}="true"; the runtime was not touched '
    "(remove the label to resume)"
)


def skip(ctx: ReconcileContext) -> Outcome:
    """The outcome of a paused Kyma's reconcile: no runtime call, no status change."""
    kyma = ctx.kyma
    kyma.next_reconcile_at = ctx.now + dt.timedelta(seconds=settings.RECONCILE_READY_INTERVAL)
    Kyma.objects.filter(pk=kyma.pk).update(next_reconcile_at=kyma.next_reconcile_at)
    return Outcome(kyma.state, 0, MESSAGE)
