"""Metrics of logins and refusals (web role ``/metrics``)."""

from __future__ import annotations

from prometheus_client import Counter

LOGINS = Counter(
    "controlplane_logins",
    "Logins to the admin and dashboard, by how: oidc (single sign-on), local (a password, single sign-on "
    "off) or break-glass (a password while single sign-on is on).",
    ["via"],
)
UNAUTHENTICATED_REFUSALS = Counter(
    "controlplane_unauthenticated_refusals",
    "Writes refused because the client was not authenticated (no or a wrong key, no session), all of "
    "them; the audit trail records only a sample (AUDIT_UNAUTHENTICATED_PER_MINUTE).",
    ["door"],
)
UNAUTHENTICATED_SAMPLED_OUT = Counter(
    "controlplane_unauthenticated_refusals_unrecorded",
    "Unauthenticated refused writes left out of the audit trail because its per-minute budget was spent.",
    ["door"],
)
