"""What a rollout does for each kind of change: hold the subject, release a wave, judge a runtime,
roll back, complete.

The engine (:mod:`.engine`) and the services (:mod:`.services`) are the same for every kind; a
:class:`Subject` knows its kind's rows. Module versions and Kyma specs live in this app
(:mod:`.subjects`); Watchers and the runtime watcher's settings in the watchers app, which
registers its subjects when it starts (the engine sits below that app and never imports it).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from fleet.models import Kyma, KymaState, Rollout, RolloutTarget
from kernel.errors import ValidationFailed

# Reasons of an Error that say nothing about the change (the runtime could not be reached at all):
# such a runtime is not judged yet; its time limit runs on.
UNREACHED = frozenset({"Unreachable", "NoKubeconfig"})


@dataclass(frozen=True)
class Verdict:
    """How a released runtime is doing: ``Ready``, ``Failed`` (with why), ``Waiting`` for its
    maintenance window (which opens at ``opens_at``: always known), ``Progressing`` (it has the
    new target, not Ready yet), or not known yet (``""``: e.g. not reconciled since its release)."""

    state: str = ""
    reason: str = ""
    opens_at: dt.datetime | None = None

    def __post_init__(self) -> None:
        # The engine puts no time limit on a wait: one with no end would hold its wave for ever.
        # A runtime that can never get a window has failed the gate (the subject says why).
        if self.state == "Waiting" and self.opens_at is None:
            raise ValueError(f"a Waiting verdict needs the time its window opens ({self.reason!r})")


NOT_YET = Verdict()


class Subject:
    """One kind of change. Every hook runs inside the rollout's transaction."""

    kind: str = ""

    def describe(self, rollout: Rollout) -> str:
        """``keda 1.0.0 → 1.1.0 in channel regular``."""
        old, new = rollout.from_value.get("value"), rollout.to_value.get("value")
        return f"{rollout.subject}: {self.label(old)} → {self.label(new)}"

    def label(self, value: Any) -> str:
        return "—" if value in (None, "", {}) else str(value)

    def hold(self, rollout: Rollout) -> None:
        """Mark the subject: runtimes not released keep their old target."""

    def unhold(self, rollout: Rollout) -> None:
        """Remove the subject's mark when it still names ``rollout`` (every runtime gets the new
        target, or a newer rollout's mark is there)."""

    def release(self, rollout: Rollout, targets: list[RolloutTarget]) -> None:
        """A wave starts: what else but the target rows says these runtimes have the new target."""

    def roll_back(self, rollout: Rollout, targets: list[RolloutTarget]) -> None:
        """These released runtimes get their old target again."""

    def complete(self, rollout: Rollout) -> list[int]:
        """Every runtime has the new target now; returns Kymas to reconcile beyond its targets
        (those that took the subject up since the rollout began)."""
        return []

    def prefetch(self, rollout: Rollout, kymas: Iterable[Kyma]) -> Any:
        """What :meth:`judge` needs beyond the Kyma rows, read once per wave."""
        return None

    def judge(self, rollout: Rollout, target: RolloutTarget, kyma: Kyma, extra: Any) -> Verdict:
        """How a released runtime is doing, from the database (the reconcile wrote it)."""
        return judge_kyma(target, kyma)

    def start_by_hand(
        self,
        change: dict[str, Any],
        *,
        name: str,
        waves: list[dict[str, Any]] | None,
        gate: dict[str, Any] | None,
        user: Any,
    ) -> Rollout:
        """A Rollout document applied by a person: make the change and send it out in waves.
        Errors name ``spec.change`` fields."""
        raise ValidationFailed(
            f"a {self.kind} rollout is started by its change, not by hand",
            errors=[("spec.change.kind", f"{self.kind} changes go out when they are applied")],
        )


def reconciled_since(target: RolloutTarget, kyma: Kyma) -> bool:
    return (
        target.released_at is not None
        and kyma.last_reconcile_at is not None
        and kyma.last_reconcile_at >= target.released_at
    )


def judge_kyma(target: RolloutTarget, kyma: Kyma) -> Verdict:
    """The whole runtime's state after a reconcile with the new target: Ready, or an Error that
    is not about reaching the runtime."""
    if not reconciled_since(target, kyma):
        return NOT_YET
    if kyma.state == KymaState.ERROR and kyma.state_reason not in UNREACHED:
        message = (kyma.last_operation or {}).get("operation", "") or kyma.state_reason
        return Verdict("Failed", f"{kyma.state_reason or 'Error'}: {message}"[:1000])
    if kyma.state == KymaState.READY and kyma.observed_generation == kyma.generation:
        return Verdict("Ready")
    return NOT_YET


_SUBJECTS: dict[str, Subject] = {}


def register(subject: Subject) -> None:
    _SUBJECTS[subject.kind] = subject


def subject_for(kind: str) -> Subject:
    try:
        return _SUBJECTS[kind]
    except KeyError:
        raise LookupError(f"no rollout subject registered for {kind!r}") from None
