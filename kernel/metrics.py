"""Gauges computed at scrape time from the database, contributed by each app.

Apps register a collect function in their ``ready()`` (fleet: Kymas by state and queued
reconciles; pki: certificates); the project's ``/metrics`` adds them to every scrape.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import GaugeMetricFamily
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
