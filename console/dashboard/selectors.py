"""Reads behind the fleet dashboard: a fixed number of aggregate queries, whatever the fleet size.

Every figure here has a matching admin list filter (the same ``Q`` objects or time bounds), so a
number on the dashboard and the list it links to always agree.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field

from django.db.models import Count, F, IntegerField, QuerySet, Sum, Value
from django.db.models import Window as Ranked
from django.db.models.functions import RowNumber
from django.utils import timezone

from fleet.models import Job, Kyma, KymaState, ReconcileRecord
from fleet.selectors import watcher_q
from listener.models import WatchEventRecord
from pki import selectors as pki_selectors
from pki.metrics import EXPIRING_WITHIN, OVERDUE_AFTER
from pki.models import GatewaySecretState

# Narrows a queryset to what the viewer may see (access.scope.scoped for one user); the identity
# for the whole fleet.
Narrow = Callable[[QuerySet], QuerySet]


def everything(queryset: QuerySet) -> QuerySet:
    return queryset


WINDOW_MINUTES = 60
LATENCY_SAMPLE = 2000
REASONS_SHOWN = 12  # groups of failing runtimes (the rest: one "other reasons" line)
PER_REASON_SHOWN = 10  # Kymas listed under each reason (the group links to all of them)
JOBS_SHOWN = 5
FAILING_FIELDS = (
    "id",
    "namespace",
    "name",
    "runtime_id",
    "state",
    "state_reason",
    "conditions",
    "last_operation",
    "updated_at",
    # (the row beside the Kyma, read in the same query)
    "reconcile_state__last_reconcile_at",
    "reconcile_state__error_streak",
)


@dataclass(frozen=True)
class Window:
    """The last hour in whole minutes: ``start`` is a minute boundary, the last minute is running."""

    start: dt.datetime
    minutes: int

    @classmethod
    def ending(cls, now: dt.datetime, minutes: int = WINDOW_MINUTES) -> Window:
        current = now.replace(second=0, microsecond=0)
        return cls(start=current - dt.timedelta(minutes=minutes - 1), minutes=minutes)

    def minute(self, index: int) -> dt.datetime:
        return self.start + dt.timedelta(minutes=index)


def per_minute(queryset: QuerySet, column: str, window: Window, *, total: str | None = None) -> list[int]:
    """Rows (or the sum of ``total``) per minute of the window, oldest minute first.

    One statement made of one index range per minute (``UNION ALL``). A ``GROUP BY`` of a
    minute expression computes that expression for every row of the hour and sorts them all;
    at fleet scale (160,000 events an hour) that took four times as long as these 60 seeks.
    """
    aggregate = Sum(total) if total else Count("pk")
    parts = [
        queryset.filter(**{f"{column}__gte": window.minute(index), f"{column}__lt": window.minute(index + 1)})
        .order_by()
        .annotate(bucket=Value(index, output_field=IntegerField()))
        .values("bucket")
        .annotate(value=aggregate)
        .values_list("bucket", "value")
        for index in range(window.minutes)
    ]
    values = [0] * window.minutes
    for bucket, value in parts[0].union(*parts[1:], all=True):
        values[bucket] = value or 0
    return values


def percentile(ordered: list[int], pct: float) -> int | None:
    if not ordered:
        return None
    return ordered[min(len(ordered) - 1, round(pct / 100 * (len(ordered) - 1)))]


@dataclass(frozen=True)
class Latency:
    p50: int | None
    p95: int | None
    sample: int


def reconcile_latency(
    since: dt.datetime, limit: int = LATENCY_SAMPLE, narrow: Narrow = everything
) -> Latency:
    """Duration percentiles of the most recent reconciles since ``since`` (at most ``limit``)."""
    durations = sorted(
        narrow(ReconcileRecord.objects.all())
        .filter(started_at__gte=since)
        .order_by("-started_at")
        .values_list("duration_ms", flat=True)[:limit]
    )
    return Latency(percentile(durations, 50), percentile(durations, 95), len(durations))


def kyma_state_counts(narrow: Narrow = everything) -> dict[str, int]:
    counts = dict(narrow(Kyma.objects.all()).values_list("state").annotate(n=Count("id")).order_by())
    return {state: counts.get(state, 0) for state in KymaState.values}


def watcher_counts(now: dt.datetime, narrow: Narrow = everything) -> dict[str, int]:
    return narrow(Kyma.objects.all()).aggregate(
        **{kind: Count("id", filter=watcher_q(kind, now)) for kind in ("silent", "never")}
    )


@dataclass(frozen=True)
class FailingRuntime:
    kyma: Kyma
    reason: str
    message: str
    since: str


def error_condition(kyma: Kyma) -> tuple[str, str, str]:
    """(reason, message, since) of the condition that explains an Error: the first one not True."""
    for condition in kyma.conditions or ():
        if condition.get("status") != "True":
            return (
                condition.get("reason", ""),
                condition.get("message", ""),
                condition.get("lastTransitionTime", ""),
            )
    operation = kyma.last_operation or {}
    return "", operation.get("operation", ""), operation.get("lastUpdateTime", "")


@dataclass(frozen=True)
class FailingGroup:
    """Kymas in Error for one reason: how many, and the most recently reconciled few."""

    reason: str
    count: int
    kymas: list[FailingRuntime]


def failing_by_reason(
    groups: int = REASONS_SHOWN, per_group: int = PER_REASON_SHOWN, narrow: Narrow = everything
) -> tuple[list[FailingGroup], int]:
    """Kymas in Error grouped by reason, the largest group first, and how many Kymas fall in the
    groups not shown. Two queries whatever the fleet: the counts, and the newest ``per_group`` of
    every shown group at once (a window function ranks them)."""
    counts = list(
        narrow(Kyma.objects.all())
        .filter(state=KymaState.ERROR)
        .values_list("state_reason")
        .annotate(n=Count("id"))
        .order_by("-n", "state_reason")
    )
    shown, rest = counts[:groups], counts[groups:]
    reasons = [reason for reason, _ in shown]
    ranked = (
        narrow(Kyma.objects.all())
        .filter(state=KymaState.ERROR, state_reason__in=reasons)
        .select_related("reconcile_state")
        .only(*FAILING_FIELDS)
        .annotate(
            rank=Ranked(
                RowNumber(),
                partition_by=[F("state_reason")],
                order_by=[F("reconcile_state__last_reconcile_at").desc(nulls_last=True), F("id").desc()],
            )
        )
        .filter(rank__lte=per_group)
        .order_by("state_reason", "rank")
    )
    members: dict[str, list[FailingRuntime]] = {}
    for kyma in ranked if reasons else ():
        members.setdefault(kyma.state_reason, []).append(FailingRuntime(kyma, *error_condition(kyma)))
    return (
        [FailingGroup(reason, count, members.get(reason, [])) for reason, count in shown],
        sum(count for _, count in rest),
    )


@dataclass
class FleetOverview:
    """Everything the dashboard shows, read at ``now``."""

    now: dt.datetime
    window: Window
    states: dict[str, int]
    watchers: dict[str, int]
    events: list[int]
    reconciles: list[int]
    latency: Latency
    certificates_expiring: int
    renewals_overdue: int
    failing_groups: list[FailingGroup]
    failing_other: int  # Kymas in Error under reasons beyond the groups shown
    jobs: list[Job] = field(default_factory=list)  # Kymas in Error under reasons beyond the groups shown
    gateway_secrets: list[GatewaySecretState] = field(default_factory=list)  # kept by the control plane

    @property
    def kymas(self) -> int:
        return sum(self.states.values())

    @property
    def events_total(self) -> int:
        return sum(self.events)

    @property
    def reconciles_total(self) -> int:
        return sum(self.reconciles)


def fleet_overview(
    now: dt.datetime | None = None,
    *,
    narrow: Narrow = everything,
    jobs: QuerySet | None = None,
    whole_fleet: bool = True,
) -> FleetOverview:
    """The dashboard's figures: ten queries, each an aggregate or a short bounded list, of the
    Kymas ``narrow`` leaves (a scoped viewer's), and ``jobs`` (default: everyone's)."""
    now = now or timezone.now()
    window = Window.ending(now)
    groups, other = failing_by_reason(narrow=narrow)
    jobs = Job.objects.all() if jobs is None else jobs
    return FleetOverview(
        now=now,
        window=window,
        states=kyma_state_counts(narrow),
        watchers=watcher_counts(now, narrow),
        events=per_minute(narrow(WatchEventRecord.objects.all()), "received_at", window, total="count"),
        reconciles=per_minute(narrow(ReconcileRecord.objects.all()), "started_at", window),
        latency=reconcile_latency(window.start, narrow=narrow),
        certificates_expiring=narrow(pki_selectors.certificates_expiring(EXPIRING_WITHIN, now)).count(),
        renewals_overdue=narrow(pki_selectors.renewals_overdue(OVERDUE_AFTER, now)).count(),
        jobs=list(jobs.select_related("created_by").defer("log")[:JOBS_SHOWN]),
        # The gateway's credential is the whole control plane's: a scoped viewer does not see it.
        gateway_secrets=list(GatewaySecretState.objects.order_by("namespace", "name")) if whole_fleet else [],
        failing_groups=groups,
        failing_other=other,
    )
