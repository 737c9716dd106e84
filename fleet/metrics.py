"""Fleet gauges and counters computed from the database at scrape time (right whichever process
answers)."""

from __future__ import annotations

from collections.abc import Iterator

from django.db.models import Count
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from fleet.models import (
    DriftCount,
    FleetCounter,
    Kyma,
    KymaState,
    Module,
    ModuleConfig,
    Rollout,
    RolloutState,
    RolloutTarget,
    TargetState,
)
from fleet.models.records import PURGES, THROTTLED_MILLISECONDS, THROTTLED_REQUESTS
from fleet.models.rollout import ACTIVE_STATES, RELEASED_STATES
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
    yield from counters()
    yield from mandatory_modules()
    yield from rollouts()


def counters() -> Iterator[CounterMetricFamily]:
    """The fleet-wide counters reconciles keep (one query)."""
    totals = dict(FleetCounter.objects.filter(label="").values_list("name", "total"))
    throttled = CounterMetricFamily(
        "controlplane_runtime_requests_throttled",
        "Requests to runtimes that waited for their client's rate limit "
        "(RUNTIME_CLIENT_QPS, RUNTIME_CLIENT_BURST)",
    )
    throttled.add_metric([], totals.get(THROTTLED_REQUESTS, 0))
    yield throttled
    waited = CounterMetricFamily(
        "controlplane_runtime_throttled_seconds",
        "Seconds requests to runtimes waited for their client's rate limit, in all",
    )
    waited.add_metric([], totals.get(THROTTLED_MILLISECONDS, 0) / 1000)
    yield waited
    purges = CounterMetricFamily(
        "lifecycle_mgr_purgectrl_requests",
        "Kyma deletions that purged what a finalizer held in the runtime after KYMA_PURGE_AFTER "
        "(upstream's name)",
    )
    purges.add_metric([], totals.get(PURGES, 0))
    yield purges


def mandatory_modules() -> Iterator[GaugeMetricFamily]:
    """Upstream's mandatory-module metrics (two queries): how many there are, and each one's
    state in each runtime that holds it (its manager's report; Processing until it reports).
    Upstream sets a series per state (1 for the current one, 0 for the others); only the current
    one is exported here (value 1), one series per runtime and module, which reads alike with
    ``== 1``."""
    count = GaugeMetricFamily("lifecycle_mgr_mandatory_modules", "Mandatory modules in the catalog")
    count.add_metric([], Module.objects.filter(mandatory=True, deletion_timestamp__isnull=True).count())
    yield count
    states = GaugeMetricFamily(
        "lifecycle_mgr_mandatory_module_state",
        "State of a mandatory module in a runtime (1: the state it is in)",
        labels=["module_name", "kyma_name", "state"],
    )
    rows = ModuleConfig.objects.filter(module__mandatory=True).values_list(
        "module__name", "kyma__name", "status"
    )
    for module, kyma, status in rows.order_by("module__name", "kyma__name"):
        state = (status or {}).get("state") if isinstance(status, dict) else None
        states.add_metric([module, kyma, state or KymaState.PROCESSING], 1)
    yield states


def rollouts() -> Iterator[GaugeMetricFamily]:
    """Rollouts by state; for those under way, their runtimes by state, the share changed and the
    current wave (three queries; labelled by rollout, which only those under way are)."""
    by_state = dict(Rollout.objects.values_list("state").annotate(n=Count("id")).order_by())
    family = GaugeMetricFamily("controlplane_rollouts", "Rollouts by state", labels=["state"])
    for state in RolloutState.values:
        family.add_metric([state], by_state.get(state, 0))
    yield family
    active = list(
        Rollout.objects.filter(state__in=ACTIVE_STATES).values_list(
            "pk", "name", "kind", "current_wave", "runtimes"
        )
    )
    counts: dict[int, dict[str, int]] = {}
    rows = RolloutTarget.objects.filter(rollout_id__in=[row[0] for row in active])
    for rollout_id, state, n in rows.values_list("rollout_id", "state").annotate(n=Count("id")).order_by():
        counts.setdefault(rollout_id, {})[state] = n
    runtimes = GaugeMetricFamily(
        "controlplane_rollout_runtimes",
        "Runtimes of each rollout under way, by their state in it",
        labels=["rollout", "kind", "state"],
    )
    progress = GaugeMetricFamily(
        "controlplane_rollout_progress_ratio",
        "Share of a rollout's runtimes that have the new target (0 to 1)",
        labels=["rollout", "kind"],
    )
    wave = GaugeMetricFamily(
        "controlplane_rollout_current_wave",
        "The wave a rollout under way is at (1 = the first)",
        labels=["rollout", "kind"],
    )
    for pk, name, kind, current, total in active:
        found = counts.get(pk, {})
        for state in TargetState.values:
            runtimes.add_metric([name, kind, state], found.get(state, 0))
        changed = sum(n for state, n in found.items() if state in RELEASED_STATES)
        progress.add_metric([name, kind], changed / total if total else 1.0)
        wave.add_metric([name, kind], current + 1)
    yield runtimes
    yield progress
    yield wave
