"""The roles a binding can grant, and what each may do.

A capability is a kind of right a door asks for; a role is a set of capabilities:

============  ====  ======  =====  =====
role          view  change  audit  admin
============  ====  ======  =====  =====
viewer        yes
auditor       yes           yes
operator      yes   yes
fleet-admin   yes   yes     yes    yes (only when bound to every runtime)
============  ====  ======  =====  =====

``admin`` covers what belongs to no runtime (the module catalog, Watchers, certificates
authorities, users, tokens, role bindings): a scope of part of the fleet cannot hold it, or a
scoped administrator could widen its own scope.
"""

from __future__ import annotations

from django.db import models

VIEW, CHANGE, AUDIT, ADMIN = "view", "change", "audit", "admin"
CAPABILITIES = (VIEW, CHANGE, AUDIT, ADMIN)


class Role(models.TextChoices):
    VIEWER = "viewer", "Viewer"
    AUDITOR = "auditor", "Auditor"
    OPERATOR = "operator", "Operator"
    FLEET_ADMIN = "fleet-admin", "Fleet admin"


GRANTS: dict[str, frozenset[str]] = {
    Role.VIEWER: frozenset({VIEW}),
    Role.AUDITOR: frozenset({VIEW, AUDIT}),
    Role.OPERATOR: frozenset({VIEW, CHANGE}),
    Role.FLEET_ADMIN: frozenset({VIEW, CHANGE, AUDIT, ADMIN}),
}

# Django model permissions each capability brings ("app_label.codename"; "app_label.*" is every
# permission of the app). The doors keep asking Django's ``has_perm``; the scope then narrows
# which Kymas those permissions reach.
FLEET_APPS = ("controlplane", "watchers", "pki", "listener")
PERMISSIONS: dict[str, tuple[str, ...]] = {
    VIEW: tuple(f"{app}.view_*" for app in FLEET_APPS),
    CHANGE: (
        "controlplane.add_kyma",
        "controlplane.change_kyma",
        "controlplane.add_rollout",
        "controlplane.change_rollout",
        "controlplane.view_job",
    ),
    AUDIT: (
        "kernel.view_auditentry",
        "axes.view_accessattempt",
        "axes.view_accessfailurelog",
        "axes.view_accesslog",
    ),
    ADMIN: ("*",),
}
# A fleet admin scoped to part of the fleet: what an operator may, plus deleting its Kymas.
SCOPED_ADMIN_EXTRA = ("controlplane.delete_kyma",)

DESCRIPTIONS: dict[str, str] = {
    Role.VIEWER: "sees the Kymas of its scope (admin, dashboard, API, watches), the catalog and Watchers",
    Role.AUDITOR: "what a viewer sees, and the audit trail of its scope (unscoped: all of it, and "
    "failed logins)",
    Role.OPERATOR: "what a viewer sees; changes, reconciles and creates the Kymas of its scope; starts, "
    "pauses and resumes rollouts whose every runtime is in its scope",
    Role.FLEET_ADMIN: "everything; scoped to part of the fleet, an operator that may also delete its Kymas "
    "and read their audit trail",
}
