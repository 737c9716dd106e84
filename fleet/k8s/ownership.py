"""How the control plane marks what it owns in a runtime: one label, one field manager.

Every object the reconciler writes into a runtime carries ``operator.kyma-project.io/managed-by:
kyma`` (upstream's label; lifecycle-manager's own objects say ``lifecycle-manager``, which the
reconciler takes over) and is written with one field manager, ``RUNTIME_FIELD_MANAGER``
(``kyma-control-plane``). The runtime's guard (``reconciler.access``) lets the control plane's
identity change or delete an object only when it carries that label or lists that manager, the
labelled lists that recheck several objects at once select by it, and the runtime watcher's
webhook for owned objects selects by it. This is the one place that spells them.
"""

from __future__ import annotations

from django.conf import settings

MANAGED_BY_LABEL = "operator.kyma-project.io/managed-by"
MANAGED_BY_VALUE = "kyma"
MANAGED_BY = {MANAGED_BY_LABEL: MANAGED_BY_VALUE}
MANAGED_SELECTOR = f"{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}"
# Upstream's lifecycle-manager: the managed-by value and field manager of what it wrote, which
# the control plane takes over when a runtime moves from upstream to us.
UPSTREAM_MANAGER = "lifecycle-manager"


def managed_by() -> dict[str, str]:
    """A fresh copy of the label (callers add their own labels to it)."""
    return dict(MANAGED_BY)


def field_manager() -> str:
    """The field manager of every write the control plane makes in a runtime."""
    return settings.RUNTIME_FIELD_MANAGER
