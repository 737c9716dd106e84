"""Prometheus metrics.

Counters and histograms live in the process that observes them; with several gunicorn workers
``PROMETHEUS_MULTIPROC_DIR`` is set and every worker's values are summed at scrape time. Fleet
gauges (Kymas by state, queued reconciles, ...) are computed from the database at scrape time,
so they are right whichever process answers.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest, multiprocess
from prometheus_client.registry import Collector

from kernel.metrics import ScrapeTimeCollector


class _Forward(Collector):
    """The process-local default registry, inside a per-scrape registry."""

    def collect(self) -> Iterator:
        yield from REGISTRY.collect()


def exposition(*, fleet: bool = True) -> tuple[bytes, str]:
    registry = CollectorRegistry(auto_describe=False)
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        multiprocess.MultiProcessCollector(registry)
    else:
        registry.register(_Forward())
    if fleet:
        registry.register(ScrapeTimeCollector())
    return generate_latest(registry), CONTENT_TYPE_LATEST
