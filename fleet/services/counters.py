"""Fleet-wide counters (:class:`fleet.models.FleetCounter`): written by whichever process counts,
read by ``fleet.metrics`` at scrape time."""

from __future__ import annotations

from django.db import IntegrityError, transaction
from django.db.models import F

from fleet.models import FleetCounter


def count(name: str, n: int = 1, *, label: str = "") -> None:
    """Add ``n`` to the counter ``name`` (one UPDATE; an INSERT the first time)."""
    if n <= 0:
        return
    if FleetCounter.objects.filter(name=name, label=label).update(total=F("total") + n):
        return
    try:
        with transaction.atomic():
            FleetCounter.objects.create(name=name, label=label, total=n)
    except IntegrityError:  # another process created it meanwhile
        FleetCounter.objects.filter(name=name, label=label).update(total=F("total") + n)


def counter_totals(name: str) -> dict[str, int]:
    """The series of one counter by label."""
    return dict(FleetCounter.objects.filter(name=name).values_list("label", "total"))
