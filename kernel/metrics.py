"""Prometheus metrics of every process, and the gauges each app computes at scrape time.

Counters and histograms live in the process that observes them; with several gunicorn workers
``PROMETHEUS_MULTIPROC_DIR`` is set and every worker's values are summed at scrape time. Gauges
from the database (Kymas by state, queued reconciles, certificates) are computed at scrape time by
collect functions the apps register in their ``ready()``, so they are right whichever process
answers.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

from prometheus_client import REGISTRY, CollectorRegistry, multiprocess
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector

Collect = Callable[[], Iterator[GaugeMetricFamily]]
_COLLECTORS: dict[str, Collect] = {}


def register_collector(name: str, collect: Collect) -> None:
    _COLLECTORS[name] = collect


class ScrapeTimeCollector(Collector):
    """Every registered app's gauges, computed now."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        for collect in _COLLECTORS.values():
            yield from collect()


class _Forward(Collector):
    """The process-local default registry, inside a per-scrape registry."""

    def collect(self) -> Iterator:
        yield from REGISTRY.collect()


def scrape_registry(*, fleet: bool = True) -> CollectorRegistry:
    """What a scrape of this process shows: every worker's values (summed) when
    ``PROMETHEUS_MULTIPROC_DIR`` is set, else this process's; with ``fleet``, the fleet gauges."""
    registry = CollectorRegistry(auto_describe=False)
    #: Where gunicorn workers share metrics.
    #: Default: set by `serve`
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        multiprocess.MultiProcessCollector(registry)
    else:
        registry.register(_Forward())
    if fleet:
        registry.register(ScrapeTimeCollector())
    return registry


def exposition(*, fleet: bool = True, accept: str = "") -> tuple[bytes, str]:
    """(body, content type) in the format the scraper's ``Accept`` header asks for."""
    encode, content_type = choose_encoder(accept)
    return encode(scrape_registry(fleet=fleet)), content_type
