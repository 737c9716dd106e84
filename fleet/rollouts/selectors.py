"""Reads of rollouts for people: the rollout page, ``manage.py rollout status``, the dashboard and
the Kyma page. Each read is bounded (a fixed number of queries whatever the fleet's size)."""

from __future__ import annotations

import datetime as dt
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from django.db.models import Count, QuerySet
from django.utils import timezone

from fleet.models import Kyma, Module, Rollout, RolloutEvent, RolloutState, RolloutTarget, TargetState
from fleet.models.rollout import ACTIVE_STATES, HOLDING_STATES, RELEASED_STATES, wave_name
from kernel.documents.selectors import describe

from .kinds import subject_for

RUNTIMES_SHOWN = 100  # of the current wave, failing and waiting ones first
EVENTS_SHOWN = 50
ORDER = {
    TargetState.FAILED: 0,
    TargetState.WAITING: 1,
    TargetState.PROGRESSING: 2,
    TargetState.PENDING: 3,
    TargetState.EXCLUDED: 4,
    TargetState.ROLLED_BACK: 5,
    TargetState.READY: 6,
}


@dataclass
class WaveRow:
    index: int
    name: str
    size: str
    selector: str
    runtimes: int
    counts: dict[str, int]
    current: bool
    done: bool

    @property
    def changed(self) -> int:
        return sum(n for state, n in self.counts.items() if state in RELEASED_STATES)

    def percent(self, state: str) -> float:
        return round(100 * self.counts.get(state, 0) / self.runtimes, 1) if self.runtimes else 0.0

    @property
    def bar(self) -> list[tuple[str, float, int]]:
        """(state, percent of the wave, count) for the progress bar, in a fixed order."""
        return bar(self.counts, self.runtimes)


BAR_ORDER = (
    TargetState.READY,
    TargetState.EXCLUDED,
    TargetState.PROGRESSING,
    TargetState.WAITING,
    TargetState.FAILED,
    TargetState.ROLLED_BACK,
    TargetState.PENDING,
)


def bar(counts: dict[str, int], total: int) -> list[tuple[str, float, int]]:
    """(state, percent of ``total``, count) per state, in the order a progress bar shows them."""
    return [
        (state, round(100 * counts[state] / total, 1) if total else 0.0, counts[state])
        for state in BAR_ORDER
        if counts.get(state)
    ]


@dataclass
class Gate:
    """The current wave's gate, in figures."""

    counted: int
    failed: int
    allowed: int
    max_error_ratio: float
    timeout_seconds: int
    bake_seconds: int
    ready: int
    undecided: int

    @property
    def error_ratio(self) -> float:
        return self.failed / self.counted if self.counted else 0.0


@dataclass
class RolloutPage:
    rollout: Rollout
    description: str
    from_label: str
    to_label: str
    waves: list[WaveRow]
    counts: dict[str, int]
    gate: Gate | None
    runtimes: list[RolloutTarget]
    runtimes_more: int
    events: list[RolloutEvent] = field(default_factory=list)

    @property
    def changed(self) -> int:
        return sum(n for state, n in self.counts.items() if state in RELEASED_STATES)

    @property
    def bar(self) -> list[tuple[str, float, int]]:
        return bar(self.counts, self.rollout.runtimes)

    @property
    def percent_changed(self) -> int:
        return round(100 * self.changed / self.rollout.runtimes) if self.rollout.runtimes else 100


def rollout_page(rollout: Rollout) -> RolloutPage:
    """What a rollout's page shows (four queries, whatever the number of runtimes)."""
    per_wave: dict[int, Counter] = {}
    for wave, state, n in _counts(rollout):
        per_wave.setdefault(wave, Counter())[state] += n
    counts: Counter = Counter()
    for wave_counts in per_wave.values():
        counts.update(wave_counts)
    waves = [
        WaveRow(
            index=index,
            name=wave_name(wave, index),
            size=str(wave["size"]) if isinstance(wave["size"], str) else f"{wave['size']} runtime(s)",
            selector=describe(wave.get("selector")),
            runtimes=sum(per_wave.get(index, Counter()).values()),
            counts=dict(per_wave.get(index, Counter())),
            current=index == rollout.current_wave and rollout.state in ACTIVE_STATES,
            done=index < rollout.current_wave or rollout.state == RolloutState.COMPLETED,
        )
        for index, wave in enumerate(rollout.waves)
    ]
    current = max(rollout.current_wave, 0)
    judging = rollout.current_wave >= 0 and rollout.state in ACTIVE_STATES
    gate = _gate(rollout, per_wave.get(current, Counter())) if judging else None
    shown = list(
        RolloutTarget.objects.filter(rollout=rollout, wave=current)
        .select_related("kyma")
        .only(
            "id",
            "state",
            "reason",
            "released_at",
            "judged_at",
            "window_opens_at",
            "wave",
            "kyma__id",
            "kyma__name",
            "kyma__namespace",
            "kyma__runtime_id",
            "kyma__state",
        )
        .order_by("state", "kyma__name")[: RUNTIMES_SHOWN * 2]
    )
    shown.sort(key=lambda t: (ORDER.get(t.state, 9), t.kyma.name))
    size = sum(per_wave.get(current, Counter()).values())
    subject = subject_for(rollout.kind)
    return RolloutPage(
        rollout=rollout,
        description=subject.describe(rollout),
        from_label=subject.label(rollout.from_value.get("value")),
        to_label=subject.label(rollout.to_value.get("value")),
        waves=waves,
        counts=dict(counts),
        gate=gate,
        runtimes=shown[:RUNTIMES_SHOWN],
        runtimes_more=max(0, size - RUNTIMES_SHOWN),
        events=list(RolloutEvent.objects.filter(rollout=rollout).order_by("-at", "-id")[:EVENTS_SHOWN]),
    )


def _counts(rollout: Rollout) -> list[tuple[int, str, int]]:
    return list(
        RolloutTarget.objects.filter(rollout=rollout)
        .values_list("wave", "state")
        .annotate(n=Count("id"))
        .order_by()
    )


def _gate(rollout: Rollout, counts: Counter) -> Gate:
    counted = sum(counts.values()) - counts.get(TargetState.EXCLUDED, 0)
    ratio = float(rollout.gate.get("maxErrorRatio", 0.0))
    return Gate(
        counted=counted,
        failed=counts.get(TargetState.FAILED, 0),
        allowed=math.floor(ratio * counted + 1e-9),
        max_error_ratio=ratio,
        timeout_seconds=int(rollout.gate.get("timeoutSeconds", 900)),
        bake_seconds=int(rollout.gate.get("bakeSeconds", 0)),
        ready=counts.get(TargetState.READY, 0),
        undecided=sum(
            counts.get(s, 0) for s in (TargetState.PENDING, TargetState.PROGRESSING, TargetState.WAITING)
        ),
    )


@dataclass(frozen=True)
class RolloutRow:
    rollout: Rollout
    description: str
    changed: int

    @property
    def percent(self) -> int:
        runtimes = self.rollout.runtimes
        return round(100 * self.changed / runtimes) if runtimes else 100


def rollouts_under_way(
    limit: int = 10, narrow: Callable[[QuerySet], QuerySet] | None = None
) -> list[RolloutRow]:
    """Rollouts still going (running, paused, halted), halted ones first (two queries); ``narrow``
    keeps those a viewer may see."""
    queryset = Rollout.objects.filter(state__in=ACTIVE_STATES)
    queryset = narrow(queryset) if narrow is not None else queryset
    rollouts = list(queryset.order_by("-created_at")[:limit])
    order = {RolloutState.HALTED: 0, RolloutState.PAUSED: 1, RolloutState.PROGRESSING: 2}
    rollouts.sort(key=lambda r: order.get(r.state, 3))
    changed = dict(
        RolloutTarget.objects.filter(rollout__in=rollouts, state__in=RELEASED_STATES)
        .values_list("rollout_id")
        .annotate(n=Count("id"))
        .order_by()
    )
    return [RolloutRow(r, subject_for(r.kind).describe(r), changed.get(r.pk, 0)) for r in rollouts]


@dataclass(frozen=True)
class KymaHold:
    """A rollout that decides a target of one runtime: which, what it gets, whether it changed."""

    rollout: Rollout
    description: str
    state: str
    reason: str
    released: bool
    wave: int | None


def kyma_holds(kyma: Kyma) -> list[KymaHold]:
    """The rollouts that hold a target of this runtime (at most three queries): those it is part
    of, and those of a module it took up after they began (it keeps their old version)."""
    targets = list(
        RolloutTarget.objects.filter(kyma=kyma, rollout__state__in=HOLDING_STATES)
        .select_related("rollout")
        .order_by("-rollout__created_at")
    )
    holds = [
        KymaHold(
            rollout=target.rollout,
            description=subject_for(target.rollout.kind).describe(target.rollout),
            state=target.state,
            reason=target.reason,
            released=target.state in RELEASED_STATES,
            wave=target.wave,
        )
        for target in targets
    ]
    known = {target.rollout_id for target in targets}
    outside: dict[int, str] = {}
    held_modules = Module.objects.exclude(rollout_holds={}).only("name", "rollout_holds")
    modules = {module.name: module for module in held_modules}
    for entry in kyma.module_entries():
        module = modules.get(entry["name"])
        hold = (module.rollout_holds or {}).get(entry.get("channel") or kyma.channel) if module else None
        if hold and hold.get("rollout") not in known:
            outside[hold["rollout"]] = str(hold.get("from") or "none")
    for rollout in Rollout.objects.filter(pk__in=list(outside), state__in=HOLDING_STATES):
        holds.append(
            KymaHold(
                rollout=rollout,
                description=subject_for(rollout.kind).describe(rollout),
                state=TargetState.PENDING,
                reason=f"took the module up after the rollout began: keeps {outside[rollout.pk]} "
                "until it completes",
                released=False,
                wave=None,
            )
        )
    return holds


def recent_rollouts(since: dt.timedelta = dt.timedelta(days=7), limit: int = 20) -> list[Rollout]:
    return list(
        Rollout.objects.filter(created_at__gte=timezone.now() - since).order_by("-created_at")[:limit]
    )
