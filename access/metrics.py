"""Metrics of logins (web role ``/metrics``)."""

from __future__ import annotations

from prometheus_client import Counter

LOGINS = Counter(
    "controlplane_logins",
    "Logins to the admin and dashboard, by how: oidc (single sign-on), local (a password, single sign-on "
    "off) or break-glass (a password while single sign-on is on).",
    ["via"],
)
