"""Scrape-time gauges of the beat election, from the lease row (right whichever web process answers)."""

from __future__ import annotations

from collections.abc import Iterator

from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily

from controlplane.beat import LEASE_NAME
from controlplane.leases import lease_current, lease_is_live


def collect() -> Iterator[GaugeMetricFamily]:
    lease = lease_current(LEASE_NAME)
    live = lease is not None and lease_is_live(lease, timezone.now())
    since = GaugeMetricFamily(
        "controlplane_beat_leader_since_timestamp_seconds",
        "When the beat that leads now took the lease, by holder (absent while no beat leads)",
        labels=["holder"],
    )
    if live:
        since.add_metric([lease.holder], lease.acquired_at.timestamp())
    yield since
    yield GaugeMetricFamily(
        "controlplane_beat_leader_up", "1 while a beat holds its lease", value=1 if live else 0
    )
    yield GaugeMetricFamily(
        "controlplane_beat_lease_transitions",
        "How often the beat lease was taken (its term): each takeover adds one",
        value=lease.term if lease else 0,
    )
