"""The ``WatcherHeartbeat`` condition: is the runtime watcher still talking to the control plane?

Upstream cannot tell a runtime whose watcher died from a runtime where nothing changes: both are
quiet. Our runtime watcher sends a heartbeat every ``WATCHER_HEARTBEAT_INTERVAL`` and the listener
stamps ``watcher_last_seen_at``. Once the watcher has been ready for ``WATCHER_SILENT_AFTER``
seconds, a Kyma without a heartbeat in that window gets the condition False (``WatcherSilent``) and
turns Warning, so it is reconciled every ``RECONCILE_WARNING_INTERVAL`` instead of every
``RECONCILE_READY_INTERVAL``: polling stands in for the events that may be getting lost. The first
heartbeat after a silence queues a reconcile (listener), which sets the condition True again.
``WATCHER_SILENT_AFTER=0`` turns the detection off (the condition is removed).
"""

from __future__ import annotations

import datetime as dt

from fleet.selectors import watcher_heard_recently, watcher_silent_after
from kernel.timefmt import parse_rfc3339, rfc3339

from .context import FALSE, TRUE, ReconcileContext

CONDITION = "WatcherHeartbeat"


def evaluate(ctx: ReconcileContext) -> None:
    window = watcher_silent_after()
    if not window:
        ctx.drop_condition(CONDITION)
        return
    seen = ctx.kyma.watcher_last_seen_at
    if watcher_heard_recently(seen, ctx.now):
        ctx.condition(CONDITION, TRUE, "Heartbeat", "the runtime watcher reports to the control plane")
        return
    webhook = ctx.conditions.get("SKRWebhook")
    if webhook is None or webhook[0] != TRUE:
        return  # not running (yet): SKRWebhook says why; nothing to expect from it
    ready_since = _true_since(ctx, "SKRWebhook") or ctx.now
    if ctx.now - ready_since < window:
        ctx.recheck(ready_since + window)  # a fresh watcher gets the window to say hello
        return
    since = f"since {_stamp(seen)}" if seen else "since it became ready"
    ctx.condition(
        CONDITION,
        FALSE,
        "WatcherSilent",
        f"no heartbeat from the runtime watcher {since}; changes in the runtime are only seen by "
        "polling until it reports again",
    )


def _true_since(ctx: ReconcileContext, type_: str) -> dt.datetime | None:
    """When a condition that is True now became True (from the stored status)."""
    for condition in ctx.kyma.conditions:
        if condition.get("type") == type_ and condition.get("status") == TRUE:
            try:
                return parse_rfc3339(condition["lastTransitionTime"])
            except (KeyError, ValueError):
                return None
    return None


_stamp = rfc3339
