"""Prometheus metrics.

Counters and histograms live in the process that observes them; with several gunicorn workers
``PROMETHEUS_MULTIPROC_DIR`` is set and every worker's values are summed at scrape time. Fleet
gauges (Kymas by state, queued reconciles, ...) are computed from the database at scrape time,
so they are right whichever process answers.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

from prometheus_client import REGISTRY, CollectorRegistry, multiprocess
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector

# Extra scrape-time collectors registered by apps (pki, listener): name -> factory.
_FLEET_COLLECTORS: dict[str, Callable[[], Iterator[GaugeMetricFamily]]] = {}


def register_fleet_collector(name: str, collect: Callable[[], Iterator[GaugeMetricFamily]]) -> None:
    _FLEET_COLLECTORS[name] = collect


def _kymas() -> Iterator[GaugeMetricFamily]:
    from django.db.models import Count

    from controlplane.models import Kyma, KymaState

    by_state = dict(Kyma.objects.values_list("state").annotate(n=Count("id")).order_by())
    family = GaugeMetricFamily("controlplane_kymas", "Kymas by state", labels=["state"])
    for state in KymaState.values:
        family.add_metric([state or "New"], by_state.get(state, 0))
    yield family
    from controlplane.services.reconcile_flags import flags

    queued = flags().queued_count()
    yield GaugeMetricFamily(
        "controlplane_reconciles_queued", "Kymas with a reconcile waiting in the queue", value=queued
    )


register_fleet_collector("kymas", _kymas)


class _FleetCollector(Collector):
    def collect(self) -> Iterator[GaugeMetricFamily]:
        for collect in _FLEET_COLLECTORS.values():
            yield from collect()


class _Forward(Collector):
    """The process-local default registry, inside a per-scrape registry."""

    def collect(self) -> Iterator:
        yield from REGISTRY.collect()


def scrape_registry(*, fleet: bool = True) -> CollectorRegistry:
    """What a scrape of this process shows: every worker's values (summed) when
    ``PROMETHEUS_MULTIPROC_DIR`` is set, else this process's; with ``fleet``, the fleet gauges."""
    registry = CollectorRegistry(auto_describe=False)
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        multiprocess.MultiProcessCollector(registry)
    else:
        registry.register(_Forward())
    if fleet:
        registry.register(_FleetCollector())
    return registry


def exposition(*, fleet: bool = True, accept: str = "") -> tuple[bytes, str]:
    """(body, content type) in the format the scraper's ``Accept`` header asks for."""
    encode, content_type = choose_encoder(accept)
    return encode(scrape_registry(fleet=fleet)), content_type
