"""Fleet gauges and counters computed from the database at scrape time (right whichever process
answers)."""

from __future__ import annotations

from collections.abc import Iterator

from django.db.models import Count
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from fleet.models import DriftCount, Kyma, KymaState
from fleet.queue.marks import flags


def collect() -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
    by_state = dict(Kyma.objects.values_list("state").annotate(n=Count("id")).order_by())
    family = GaugeMetricFamily("controlplane_kymas", "Kymas by state", labels=["state"])
    for state in KymaState.values:
        family.add_metric([state or "New"], by_state.get(state, 0))
    yield family
    queued = flags().queued_count()
    yield GaugeMetricFamily(
        "controlplane_reconciles_queued", "Kymas with a reconcile waiting in the queue", value=queued
    )
    drift = CounterMetricFamily(
        "controlplane_drift_corrected",
        "Objects found changed in a runtime and applied again, by kind",
        labels=["kind"],
    )
    for kind, total in DriftCount.objects.values_list("kind", "total").order_by("kind"):
        drift.add_metric([kind], total)
    yield drift
