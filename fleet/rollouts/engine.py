"""Moving a rollout on: start a wave, judge its runtimes, pass or fail its gate, complete.

Beat runs :func:`rollouts_advance` every ``ROLLOUT_ADVANCE_INTERVAL``; each rollout is advanced in
its own transaction, its row locked (another beat or a person's action waits, a second advance
of the same rollout finds it locked and passes it by). Everything is read from the database: the
reconciles write the Kymas' status, the engine only reads it, so advancing costs no runtime call.

A wave starts by *releasing* its runtimes (their target rows say so, which the reconcile reads:
:mod:`.targets`) and queueing their reconciles. A runtime another rollout is changing right now
(released there, not judged yet) is left for this rollout's next wave, so only one rollout changes
a runtime at a time and a failure is always one change's. A released runtime that was not Ready
before is changed but not counted (``Excluded``): the gate judges the change, not the fleet's old
troubles. The others are judged from what their reconcile left (:meth:`.kinds.Subject.judge`):
``Ready``; ``Failed`` (the subject failed in it, or it was not Ready within the gate's
``timeoutSeconds``); ``Waiting`` for its maintenance window (the time limit starts when the window
opens; a wait always says when that is, and a runtime no window will ever open for is ``Failed``,
never ``Waiting``). As soon as more than ``maxErrorRatio`` of the wave's counted runtimes failed, the rollout
halts (``Halted``, with the figures and the first failures). When every runtime is judged and the
ratio holds, the wave is passed once ``bakeSeconds`` have gone by, and the next one starts.
"""

from __future__ import annotations

import datetime as dt
import logging
import math

from django.db import transaction
from django.utils import timezone

from fleet import queue
from fleet.models import Kyma, Rollout, RolloutEvent, RolloutState, RolloutTarget, TargetState
from fleet.models.rollout import TOUCHING_STATES, wave_name
from kernel.timefmt import display

from .kinds import Verdict, subject_for

log = logging.getLogger(__name__)

FAILURES_NAMED = 5  # in the message of a failed gate
# What the judge reads of each Kyma (a wave may hold thousands: not their kubeconfigs).
KYMA_FIELDS = (
    "id",
    "namespace",
    "name",
    "runtime_id",
    "channel",
    "modules",
    "state",
    "state_reason",
    "conditions",
    "module_status",
    "last_operation",
    "generation",
    "observed_generation",
    "labels",
    "annotations",
    "skip_maintenance_windows",
)
# The rows beside each Kyma the judge reads (when it last reconciled, the Watchers it applied,
# the watcher settings it got), in the same query.
JUDGED_ROWS = ("reconcile_state", "runtime_sync", "watcher_settings_pin")
_JUDGED = (TargetState.READY, TargetState.FAILED, TargetState.EXCLUDED)


def _write(targets: list[RolloutTarget], fields: tuple[str, ...]) -> None:
    """Store ``fields`` of the targets: one UPDATE per distinct set of values (a wave's runtimes
    mostly share them: released at once, judged Ready), not one statement per row."""
    groups: dict[tuple, list[int]] = {}
    for target in targets:
        groups.setdefault(tuple(getattr(target, name) for name in fields), []).append(target.pk)
    for values, ids in groups.items():
        for start in range(0, len(ids), 1000):
            RolloutTarget.objects.filter(pk__in=ids[start : start + 1000]).update(
                **dict(zip(fields, values, strict=True))
            )


def _event(rollout: Rollout, kind: str, text: str, wave: int | None = None) -> None:
    RolloutEvent.objects.create(rollout=rollout, kind=kind, text=text[:2000], wave=wave)


def rollouts_advance(now: dt.datetime | None = None) -> int:
    """Advance every rollout under way (beat); returns how many were looked at."""
    ids = list(Rollout.objects.filter(state=RolloutState.PROGRESSING).values_list("pk", flat=True))
    for rollout_id in ids:
        try:
            with transaction.atomic():
                rollout = (
                    Rollout.objects.select_for_update(skip_locked=True)
                    .filter(pk=rollout_id, state=RolloutState.PROGRESSING)
                    .first()
                )
                if rollout is not None:
                    advance(rollout, now)
        except Exception:  # one rollout's trouble must not stop the others
            log.exception("advancing rollout %s failed", rollout_id)
    return len(ids)


def advance(rollout: Rollout, now: dt.datetime | None = None) -> None:
    """Move ``rollout`` (locked by the caller's transaction) as far as it can go now."""
    now = now or timezone.now()
    for _ in range(len(rollout.waves) + 1):  # empty waves pass at once, one after the other
        if rollout.state != RolloutState.PROGRESSING:
            return
        if rollout.current_wave < 0:
            _start_wave(rollout, 0, now)
        if not _judge_wave(rollout, now):
            return
        if rollout.current_wave >= len(rollout.waves) - 1:
            _complete(rollout, now)
            return
        _start_wave(rollout, rollout.current_wave + 1, now)


def _save(rollout: Rollout, *fields: str) -> None:
    rollout.save(update_fields=[*fields, "updated_at"])


def _start_wave(rollout: Rollout, wave: int, now: dt.datetime) -> None:
    rollout.current_wave = wave
    rollout.wave_started_at, rollout.wave_settled_at, rollout.gate_accepted = now, None, False
    _save(rollout, "current_wave", "wave_started_at", "wave_settled_at", "gate_accepted")
    released = _release(rollout, wave, now)
    size = rollout.targets.filter(wave=wave).count()
    label = rollout.wave_label(wave)
    _event(rollout, "wave-started", f"wave {label} started: {released} of {size} runtime(s) released", wave)


def _release(rollout: Rollout, wave: int, now: dt.datetime) -> int:
    """Release the wave's runtimes that no other rollout is changing now (those go to the next
    wave, or wait in the last one); queue their reconciles. Returns how many were released."""
    pending = list(
        rollout.targets.filter(wave=wave, state=TargetState.PENDING)
        .select_related("kyma")
        .only("id", "kyma_id", "wave", "state", "from_value", "kyma__state", "kyma__name", "kyma__namespace")
    )
    if not pending:
        return 0
    busy = dict(
        RolloutTarget.objects.filter(
            kyma_id__in=[t.kyma_id for t in pending],
            state__in=TOUCHING_STATES,
            rollout__state__in=(RolloutState.PROGRESSING, RolloutState.PAUSED, RolloutState.HALTED),
        )
        .exclude(rollout=rollout)
        .values_list("kyma_id", "rollout__name")
    )
    last = wave >= len(rollout.waves) - 1
    deferred = [t for t in pending if t.kyma_id in busy]
    for target in deferred:
        target.reason = f"rollout {busy[target.kyma_id]} is changing this runtime now"
        if not last:
            target.wave = wave + 1
            target.reason += f": moved to wave {rollout.wave_label(wave + 1)}"
    _write(deferred, ("wave", "reason"))
    free = [t for t in pending if t.kyma_id not in busy]
    for target in free:
        target.released_at = target.clock_from = now
        target.was_ready = target.kyma.state == "Ready"
        if target.was_ready:
            target.state, target.reason = TargetState.PROGRESSING, ""
        else:
            target.state = TargetState.EXCLUDED
            target.reason = (
                f"was {target.kyma.state or 'New'} before the change: changed, not counted by the gate"
            )
    _write(free, ("state", "reason", "released_at", "clock_from", "was_ready"))
    if free:
        subject_for(rollout.kind).release(rollout, free)
        queue.request([t.kyma_id for t in free], reason=f"rollout {rollout.name}", urgent=True)
    return len(free)


def _verdict(rollout: Rollout, target: RolloutTarget, kyma: Kyma, extra: object, now: dt.datetime) -> Verdict:
    verdict = subject_for(rollout.kind).judge(rollout, target, kyma, extra)
    if verdict.state and verdict.state != TargetState.PROGRESSING:
        return verdict
    limit = dt.timedelta(seconds=int(rollout.gate.get("timeoutSeconds", 900)))
    if target.clock_from is not None and now - target.clock_from > limit:
        return Verdict("Failed", f"not Ready within {int(limit.total_seconds())} s of the change")
    return verdict


def _judge_wave(rollout: Rollout, now: dt.datetime) -> bool:
    """Judge the current wave; True when its gate is passed (the next wave may start)."""
    wave = rollout.current_wave
    if rollout.targets.filter(wave=wave, state=TargetState.PENDING).exists():
        _release(rollout, wave, now)  # those another rollout was changing, if it is done with them
    targets = list(rollout.targets.filter(wave=wave))
    open_ones = [t for t in targets if t.state in TOUCHING_STATES]
    if open_ones:
        kymas = (
            Kyma.objects.select_related(*JUDGED_ROWS)
            .only(*KYMA_FIELDS, *JUDGED_ROWS)
            .in_bulk([t.kyma_id for t in open_ones])
        )
        subject = subject_for(rollout.kind)
        extra = subject.prefetch(rollout, kymas.values())
        changed = []
        for target in open_ones:
            kyma = kymas.get(target.kyma_id)
            if kyma is None:
                continue  # deleted meanwhile: the row goes with it
            verdict = _verdict(rollout, target, kyma, extra, now)
            if _apply(target, verdict, now):
                changed.append(target)
        _write(changed, ("state", "reason", "judged_at", "clock_from", "window_opens_at"))
    counts: dict[str, int] = {}
    for target in targets:
        counts[target.state] = counts.get(target.state, 0) + 1
    counted = len(targets) - counts.get(TargetState.EXCLUDED, 0)
    failed = counts.get(TargetState.FAILED, 0)
    ratio = float(rollout.gate.get("maxErrorRatio", 0.0))
    allowed = math.floor(ratio * counted + 1e-9)
    label = rollout.wave_label(wave)
    if failed > allowed and not rollout.gate_accepted:
        _halt(rollout, targets, failed, counted, allowed, ratio, now)
        return False
    undecided = [t for t in targets if t.state not in _JUDGED]
    if undecided:
        rollout.message = _progress(rollout, label, counts, allowed, undecided)
        _save(rollout, "message")
        return False
    if rollout.wave_settled_at is None:
        rollout.wave_settled_at = now
        _save(rollout, "wave_settled_at")
    bake = int(rollout.gate.get("bakeSeconds", 0)) if targets else 0  # an empty wave passes at once
    if now - rollout.wave_settled_at < dt.timedelta(seconds=bake):
        rest = bake - int((now - rollout.wave_settled_at).total_seconds())
        rollout.message = f"wave {label}: every runtime judged; baking {rest} s more before the next wave"
        _save(rollout, "message")
        return False
    ready = counts.get(TargetState.READY, 0)
    figures = f"{ready} Ready, {failed} failed (at most {allowed} allowed)"
    if counts.get(TargetState.EXCLUDED):
        figures += f", {counts[TargetState.EXCLUDED]} not counted (not Ready before)"
    accepted = " (failures accepted by the operator)" if rollout.gate_accepted and failed > allowed else ""
    _event(rollout, "gate-passed", f"gate of wave {label} passed: {figures}{accepted}", wave)
    return True


def _apply(target: RolloutTarget, verdict: Verdict, now: dt.datetime) -> bool:
    """Write a verdict onto the target row; True when it changed."""
    before = (target.state, target.reason, target.window_opens_at)
    if verdict.state == TargetState.WAITING:
        target.state, target.reason = TargetState.WAITING, verdict.reason
        target.window_opens_at, target.clock_from = verdict.opens_at, now
    elif verdict.state in (TargetState.READY, TargetState.FAILED, TargetState.EXCLUDED):
        target.state, target.reason, target.judged_at = verdict.state, verdict.reason, now
    elif verdict.state == TargetState.PROGRESSING and target.state == TargetState.WAITING:
        # its window opened (the runtime took the new target): judged from now on
        target.state, target.reason, target.window_opens_at = TargetState.PROGRESSING, "", None
        target.clock_from = now
    return (target.state, target.reason, target.window_opens_at) != before


def _progress(rollout: Rollout, label: str, counts: dict[str, int], allowed: int, undecided: list) -> str:
    parts = [f"{counts.get(TargetState.READY, 0)} Ready"]
    if counts.get(TargetState.PROGRESSING):
        parts.append(f"{counts[TargetState.PROGRESSING]} progressing")
    waiting = [t for t in undecided if t.state == TargetState.WAITING]
    if waiting:
        opens = [t.window_opens_at for t in waiting if t.window_opens_at is not None]
        when = f" (the first opens {display(min(opens))})" if opens else ""
        parts.append(f"{len(waiting)} waiting for their maintenance windows{when}")
    pending = [t for t in undecided if t.state == TargetState.PENDING]
    if pending:
        parts.append(f"{len(pending)} waiting for another rollout to finish with them")
    if counts.get(TargetState.FAILED):
        parts.append(f"{counts[TargetState.FAILED]} failed (at most {allowed} allowed)")
    return f"wave {label}: " + ", ".join(parts)


def _halt(
    rollout: Rollout,
    targets: list[RolloutTarget],
    failed: int,
    counted: int,
    allowed: int,
    ratio: float,
    now: dt.datetime,
) -> None:
    failing = [t.kyma_id for t in targets if t.state == TargetState.FAILED][:FAILURES_NAMED]
    names = dict(Kyma.objects.filter(pk__in=failing).values_list("pk", "name"))
    first = [
        f"{names.get(t.kyma_id, t.kyma_id)}: {t.reason}"
        for t in targets
        if t.state == TargetState.FAILED and t.kyma_id in names
    ]
    share = f"{failed / counted:.1%}" if counted else "all"
    rollout.state = RolloutState.HALTED
    rollout.halted_reason = (
        f"the gate of wave {rollout.wave_label()} failed: {failed} of {counted} runtime(s) failed "
        f"({share}; at most {allowed} may fail: max error ratio {ratio:.0%}). " + "; ".join(first)
    )[:1000]
    rollout.message = (
        f"halted at wave {rollout.wave_label()}: resume (accepting the failures), abort or roll back"
    )
    _save(rollout, "state", "halted_reason", "message")
    _event(rollout, "halted", rollout.halted_reason, rollout.current_wave)


def _complete(rollout: Rollout, now: dt.datetime) -> None:
    subject = subject_for(rollout.kind)
    subject.unhold(rollout)
    more = subject.complete(rollout)
    rollout.state, rollout.finished_at = RolloutState.COMPLETED, now
    changed = rollout.targets.filter(state=TargetState.READY).count()
    rollout.message = (
        f"completed: every runtime has the new target ({changed} of {rollout.runtimes} judged Ready)"
    )
    _save(rollout, "state", "finished_at", "message")
    _event(rollout, "completed", rollout.message, rollout.current_wave)
    if more:
        queue.request(more, reason=f"rollout {rollout.name} completed", urgent=True)


def wave_names(rollout: Rollout) -> list[str]:
    return [wave_name(wave, index) for index, wave in enumerate(rollout.waves)]
