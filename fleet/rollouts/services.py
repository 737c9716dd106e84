"""Writes of rollouts: start one (superseding an older one of the same subject), pause, resume,
abort, roll back, delete the record of a finished one. Every interface (the subject's own
service, the admin, the API, ``manage.py rollout``, documents) calls these, and each operator's
action is recorded here in the audit trail as the acting door's (who, the state it moved the
rollout from and to); the waves themselves move in :mod:`.engine`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.utils import timezone

from fleet import queue
from fleet.models import Rollout, RolloutEvent, RolloutState, RolloutTarget, TargetState
from fleet.models.rollout import HOLDING_STATES, RELEASED_STATES, plan_waves, wave_name
from kernel import audit
from kernel.errors import Conflict
from kernel.services import resource_save

from . import engine
from .kinds import subject_for
from .planning import Member, assign

NAME_LENGTH = 200


@dataclass
class Change:
    """A change of one subject that would reach ``members`` (each with its own old target)."""

    kind: str
    subject: str
    change: dict[str, Any]
    from_value: Any
    to_value: Any
    members: Sequence[Member]
    policy: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ByHand:
    """A rollout made by hand: its name, waves and gate (in place of the policy's) and who made it.
    It goes out even to one runtime."""

    name: str
    waves: list[dict[str, Any]] | None
    gate: dict[str, Any] | None
    user: Any


def event(rollout: Rollout, kind: str, text: str, wave: int | None = None) -> None:
    RolloutEvent.objects.create(rollout=rollout, kind=kind, text=text[:2000], wave=wave)


def holding(kind: str, subject: str) -> Rollout | None:
    """The rollout that holds ``subject`` now, locked until the transaction ends."""
    return (
        Rollout.objects.select_for_update()
        .filter(kind=kind, subject=subject, state__in=HOLDING_STATES)
        .order_by("-created_at", "-id")
        .first()
    )


def _member_values(previous: Rollout) -> dict[int, Any]:
    """What each runtime of ``previous`` has now: the new target once released, else its own old."""
    values = {}
    for kyma_id, state, from_value in previous.targets.values_list("kyma_id", "state", "from_value"):
        released = state in RELEASED_STATES
        values[kyma_id] = previous.to_value.get("value") if released else (from_value or {}).get("value")
    return values


def unique_name(base: str) -> str:
    base = re.sub(r"[^a-z0-9.-]+", "-", base.lower()).strip("-.")[:NAME_LENGTH] or "rollout"
    name, number = base, 1
    while Rollout.objects.filter(name=name).exists():
        number += 1
        name = f"{base}-{number}"
    return name


def rollout_start(
    *,
    change: Change,
    name: str = "",
    automatic: bool = True,
    created_by: Any = None,
    waves: list[dict[str, Any]] | None = None,
    gate: dict[str, Any] | None = None,
) -> Rollout | None:
    """Send ``change`` out in waves; ``None`` when it reaches at most one runtime (an automatic
    change then reaches it at once). A rollout still holding the same subject is superseded: each
    of its runtimes keeps what it has now (old or new) until the new rollout's wave takes it, and
    runtimes it never named keep its old target. ``waves``/``gate`` (a rollout made by hand) take
    the place of the policy's. Must run inside the transaction that makes the change."""
    subject = subject_for(change.kind)
    previous = holding(change.kind, change.subject)
    members = list(change.members)
    from_value = change.from_value
    if previous is not None:
        had = _member_values(previous)
        members = [
            Member(m.kyma_id, m.uid, m.labels, had.get(m.kyma_id, previous.from_value.get("value")))
            for m in members
        ]
        from_value = previous.from_value.get("value")
    if automatic and len(members) <= 1:
        if previous is not None:
            _supersede(previous, None, f"a newer change reaches {len(members)} runtime(s) at once")
        return None
    policy = change.policy or {}
    rollout = Rollout(
        name=unique_name(name or f"{change.subject.replace('/', '-')}-{_short(change.to_value)}")
        if automatic
        else name,
        kind=change.kind,
        subject=change.subject,
        change=change.change,
        from_value={"value": from_value},
        to_value={"value": change.to_value},
        waves=waves or plan_waves(policy, len(members)),
        gate={**(policy.get("gate") or {}), **(gate or {})},
        automatic=automatic,
        created_by=created_by if getattr(created_by, "pk", None) else None,
        runtimes=len(members),
    )
    resource_save(rollout, before=None)
    wave_of = assign(rollout.name, rollout.waves, members)
    RolloutTarget.objects.bulk_create(
        [
            RolloutTarget(rollout=rollout, kyma_id=m.kyma_id, wave=wave, from_value={"value": m.from_value})
            for m, wave in zip(members, wave_of, strict=True)
        ],
        batch_size=1000,
    )
    if previous is not None:
        _supersede(previous, rollout, f"superseded by {rollout.name}")
    subject.hold(rollout)
    sizes = [wave_of.count(index) for index in range(len(rollout.waves))]
    plan = ", ".join(
        f"{wave_name(w, i)} {n}" for i, (w, n) in enumerate(zip(rollout.waves, sizes, strict=True))
    )
    how = "by hand" if not automatic else "automatically"
    event(rollout, "created", f"created {how}: {subject.describe(rollout)}; {len(members)} runtimes: {plan}")
    engine.advance(rollout)
    return rollout


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else ""
    return text[:40] or timezone.now().strftime("%Y%m%d%H%M%S")


def _supersede(previous: Rollout, successor: Rollout | None, why: str) -> None:
    was = previous.state
    previous.state = RolloutState.SUPERSEDED
    previous.superseded_by = successor
    previous.finished_at = timezone.now()
    previous.message = why
    previous.save(update_fields=["state", "superseded_by", "finished_at", "message", "updated_at"])
    if successor is None:
        subject_for(previous.kind).unhold(previous)
    event(previous, "superseded", f"{why} (it was {was})")


def subject_rollouts_end(kind: str, subject: str, why: str) -> int:
    """The subject is gone (a module, a Watcher deleted): its rollouts end, superseded by nothing.
    ``subject`` ending in ``/``: every subject under it (a module's channels)."""
    lookup = {"subject__startswith": subject} if subject.endswith("/") else {"subject": subject}
    ended = 0
    for rollout in Rollout.objects.select_for_update().filter(kind=kind, state__in=HOLDING_STATES, **lookup):
        _supersede(rollout, None, why)
        ended += 1
    return ended


def _locked(rollout: Rollout) -> Rollout:
    return Rollout.objects.select_for_update().get(pk=rollout.pk)


def _refuse(rollout: Rollout, action: str, allowed: frozenset[str] | set[str]) -> None:
    if rollout.state not in allowed:
        raise Conflict(f"rollout {rollout.name} is {rollout.state}: it cannot be {action}")


def _audit(rollout: Rollout, action: str, was: str) -> None:
    """An operator's action, in the audit trail: the state it moved the rollout from and to."""
    audit.record_object(
        rollout,
        action=action,
        changes=[
            {"field": "state", "before": was, "after": rollout.state},
            {"field": "message", "before": None, "after": rollout.message},
        ],
    )


@transaction.atomic
def rollout_pause(*, rollout: Rollout, user: Any = None) -> Rollout:
    """Stop a Progressing rollout until it is resumed. Beat advances only Progressing rollouts
    (:func:`.engine.rollouts_advance`), so meanwhile no further wave starts and the current one
    is not judged either: its released runtimes still reconcile to the new target, while their
    verdicts, and with them a halt or the gate's passing, wait for the resume (each runtime's time
    limit runs on)."""
    rollout = _locked(rollout)
    if rollout.state == RolloutState.PAUSED:
        return rollout
    _refuse(rollout, "paused", {RolloutState.PROGRESSING})
    was = rollout.state
    rollout.state, rollout.paused = RolloutState.PAUSED, True
    rollout.message = f"paused{_by(user)}"
    rollout.save(update_fields=["state", "paused", "message", "updated_at"])
    event(rollout, "paused", rollout.message, rollout.current_wave)
    _audit(rollout, "pause", was)
    return rollout


@transaction.atomic
def rollout_resume(*, rollout: Rollout, user: Any = None) -> Rollout:
    """Go on: after a pause, where it was; after a failed gate, with the next wave (the failures
    of this one are accepted; they stay on record)."""
    rollout = _locked(rollout)
    if rollout.state == RolloutState.PROGRESSING:
        return rollout
    _refuse(rollout, "resumed", {RolloutState.PAUSED, RolloutState.HALTED})
    was = rollout.state
    halted = was == RolloutState.HALTED
    rollout.state, rollout.paused = RolloutState.PROGRESSING, False
    text = f"resumed{_by(user)}"
    if halted:
        text += f" after the failed gate of wave {rollout.wave_label()}: its failures are accepted"
        rollout.gate_accepted = True
    rollout.halted_reason = ""
    rollout.message = text
    rollout.save(update_fields=["state", "paused", "halted_reason", "message", "gate_accepted", "updated_at"])
    event(rollout, "resumed", text, rollout.current_wave)
    _audit(rollout, "resume", was)
    engine.advance(rollout)
    return rollout


@transaction.atomic
def rollout_abort(*, rollout: Rollout, user: Any = None) -> Rollout:
    """Stop where it is: runtimes it changed keep the new target, the others keep the old."""
    rollout = _locked(rollout)
    _refuse(rollout, "aborted", {RolloutState.PROGRESSING, RolloutState.PAUSED, RolloutState.HALTED})
    was = rollout.state
    changed = rollout.targets.filter(state__in=RELEASED_STATES).count()
    rollout.state, rollout.finished_at = RolloutState.ABORTED, timezone.now()
    rollout.message = (
        f"aborted{_by(user)}: {changed} runtime(s) keep the new target, "
        f"{rollout.runtimes - changed} the old one (apply a newer change to move on)"
    )
    rollout.save(update_fields=["state", "finished_at", "message", "updated_at"])
    event(rollout, "aborted", rollout.message, rollout.current_wave)
    _audit(rollout, "abort", was)
    return rollout


@transaction.atomic
def rollout_rollback(*, rollout: Rollout, user: Any = None) -> Rollout:
    """Every runtime it changed gets its old target again, at once."""
    rollout = _locked(rollout)
    _refuse(
        rollout,
        "rolled back",
        {RolloutState.PROGRESSING, RolloutState.PAUSED, RolloutState.HALTED, RolloutState.ABORTED},
    )
    was = rollout.state
    changed = list(rollout.targets.filter(state__in=RELEASED_STATES).select_related("kyma"))
    subject_for(rollout.kind).roll_back(rollout, changed)
    RolloutTarget.objects.filter(pk__in=[t.pk for t in changed]).update(
        state=TargetState.ROLLED_BACK, reason=f"rolled back{_by(user)}", judged_at=timezone.now()
    )
    rollout.state, rollout.finished_at = RolloutState.ROLLED_BACK, timezone.now()
    rollout.message = (
        f"rolled back{_by(user)}: {len(changed)} runtime(s) get the old target again "
        "(apply a newer change to move on)"
    )
    rollout.save(update_fields=["state", "finished_at", "message", "updated_at"])
    event(rollout, "rolled-back", rollout.message, rollout.current_wave)
    _audit(rollout, "rollback", was)
    queue.request([t.kyma_id for t in changed], reason=f"rollout {rollout.name} rolled back", urgent=True)
    return rollout


# A rollout's record may go once it decides nothing any more.
FINISHED_STATES = frozenset({RolloutState.COMPLETED, RolloutState.SUPERSEDED})


@transaction.atomic
def rollout_delete(*, rollout: Rollout) -> None:
    """Delete the record of a rollout that holds nothing any more (completed or superseded)."""
    rollout = _locked(rollout)
    if rollout.state not in FINISHED_STATES:
        raise Conflict(
            f"rollout {rollout.name} is {rollout.state}: it still decides what some runtimes get; "
            "abort or roll it back and apply a newer change, or let it complete"
        )
    audit.record_object(rollout, action="delete")
    rollout.delete()


def _by(user: Any) -> str:
    name = getattr(user, "get_username", lambda: "")() if user is not None else ""
    return f" by {name}" if name else ""
