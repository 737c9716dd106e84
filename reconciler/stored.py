"""Before a reconcile trusts what it reads: the runtime has stored the changes its events saw.

A validating webhook is called before the API server stores a change, so a reconcile started at
once could read the object as it was. When the events say which change they saw
(:class:`fleet.queue.StoredChange`, sent by our runtime watcher), the reconcile reads each
object until the change shows, a few milliseconds apart, for at most ``RECONCILE_STORED_WAIT``:
a change that is never stored (another webhook rejected it) ends the wait there. A change that
cannot be checked (the object's kind is not served, the read fails) falls back to the fixed
``LISTENER_RECONCILE_DELAY``, counted from the start of the wait, as for upstream's watcher.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

from django.conf import settings

from fleet.k8s.client import ObjectKey, RuntimeAPIError, RuntimeClient, client_for
from fleet.models import Kyma
from fleet.queue import StoredChange

log = logging.getLogger(__name__)

# Objects read by key ((apiVersion, kind, namespace, name); None: absent).
Seen = dict[ObjectKey, dict[str, Any] | None]

FIRST_PAUSE = 0.002
LONGEST_PAUSE = 0.02


def wait_until_stored(kyma: Kyma, changes: Sequence[StoredChange], *, seen: Seen | None = None) -> bool:
    """Wait until the Kyma's runtime shows every change stored (bounded); True when it does.
    ``seen`` receives each changed object as read once its change showed (the reconcile that
    follows need not read it again)."""
    if not changes or not kyma.kubeconfig or kyma.is_deleting or kyma.skip_reconciliation:
        return True
    return changes_stored(
        client_for(kyma.pk, kyma.kubeconfig),
        changes,
        bound=settings.RECONCILE_STORED_WAIT,
        fallback=settings.LISTENER_RECONCILE_DELAY,
        seen=seen,
    )


def changes_stored(
    client: RuntimeClient,
    changes: Sequence[StoredChange],
    *,
    bound: float,
    fallback: float,
    seen: Seen | None = None,
) -> bool:
    """Read each changed object until its change shows; at most ``bound`` seconds. A change that
    cannot be read waits ``fallback`` seconds instead (from the start), like an event without one.
    ``seen``: see :func:`wait_until_stored`."""
    started = time.monotonic()
    deadline, hold_until = started + bound, started
    pending, pause = list(changes), FIRST_PAUSE
    while True:
        waiting = []
        for change in pending:
            try:
                live = client.get(change.api_version, change.kind, change.name, change.namespace or None)
            except RuntimeAPIError as exc:
                log.debug("cannot check that %s was stored (%s): waiting the fixed delay", change, exc)
                hold_until = max(hold_until, started + fallback)
                continue
            if not change.stored(live):
                waiting.append(change)
            elif seen is not None:
                seen[change.key] = live
        pending = waiting
        now = time.monotonic()
        if not pending or now >= deadline:
            break
        time.sleep(min(pause, deadline - now))
        pause = min(pause * 2, LONGEST_PAUSE)
    if pending:
        log.info(
            "%d change(s) not stored in the runtime after %.2f s (rejected by another webhook?): "
            "reconciling what is there",
            len(pending),
            bound,
        )
    rest = hold_until - time.monotonic()
    if rest > 0:
        time.sleep(rest)
    return not pending
