"""Server-rendered bar charts: geometry for an inline SVG (no JavaScript, no external assets)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    value: int
    label: str
    url: str


@dataclass(frozen=True)
class BarChart:
    width: int
    height: int
    peak: int
    bars: list[Bar]


def bar_chart(
    values: Sequence[int],
    *,
    labels: Sequence[str],
    urls: Sequence[str],
    width: int = 720,
    height: int = 80,
    gap: float = 2.0,
) -> BarChart:
    """One bar per value, scaled to the largest; a non-zero value is always at least 1 px high."""
    peak = max(values, default=0)
    slot = width / max(1, len(values))
    bars = []
    for index, value in enumerate(values):
        tall = 0.0 if not peak else max(1.0, value / peak * (height - 2)) if value else 0.0
        bars.append(
            Bar(
                x=round(index * slot + gap / 2, 2),
                y=round(height - tall, 2),
                width=round(max(1.0, slot - gap), 2),
                height=round(tall, 2),
                value=value,
                label=labels[index],
                url=urls[index],
            )
        )
    return BarChart(width=width, height=height, peak=peak, bars=bars)
