"""Each runtime's own target while a rollout holds a subject: what its reconcile renders.

A rollout that holds a subject leaves a mark on the subject's row, which the reconcile reads
anyway: ``Module.rollout_holds[channel]`` (the catalog, one query per reconcile) and
``Watcher.rollout_hold`` (the Watchers, one query); the runtime watcher's settings are the Kyma's
own column (``Kyma.watcher_settings``, moved wave by wave). With no mark, a runtime gets what the
catalog or the Watcher says: a no-op reconcile of a fleet with no rollout under way makes no
query more than before. With a mark, one more query (once per reconcile, whatever the number of
marks) reads this runtime's rows of the rollouts that hold something (``RolloutTarget``):

- a runtime whose wave started (``Progressing``, ``Waiting``, ``Ready``, ``Failed``, ``Excluded``)
  gets the new target (the subject's current value);
- any other runtime of the rollout (its wave has not started, or it was rolled back) gets its own
  old target (``RolloutTarget.from_value``);
- a runtime the rollout does not name (it took the module up, or came into the fleet, since the
  rollout began) gets the rollout's old target (the mark's ``from``) until the rollout completes.

The mark is written in the same transaction as the change it holds back, and a Kyma row read
before that commit has no target rows either: a runtime is never ahead of its wave.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fleet.models import Kyma, Module, RolloutTarget
from fleet.models.rollout import HOLDING_STATES, RELEASED_STATES, TargetState


@dataclass(frozen=True)
class Held:
    """A target a rollout holds for one runtime (for its Kyma page): what, at which value, why."""

    rollout_id: int
    subject: str
    value: str
    released: bool
    member: bool


@dataclass
class KymaTargets:
    """The targets of one runtime, resolved lazily (one query, only if some subject is held)."""

    kyma: Kyma
    _rows: dict[int, RolloutTarget] | None = None
    held: list[Held] = field(default_factory=list)

    def _row(self, rollout_id: int) -> RolloutTarget | None:
        if self._rows is None:
            rows = RolloutTarget.objects.filter(kyma_id=self.kyma.pk, rollout__state__in=HOLDING_STATES).only(
                "rollout_id", "state", "from_value"
            )
            self._rows = {row.rollout_id: row for row in rows}
        return self._rows.get(rollout_id)

    def resolve(self, hold: dict[str, Any]) -> tuple[bool, Any]:
        """(whether this runtime has the new target, its old target when not) under ``hold``."""
        rollout_id = hold.get("rollout")
        row = self._row(rollout_id) if isinstance(rollout_id, int) else None
        if row is not None and row.state in RELEASED_STATES:
            return True, None
        old = row.from_value.get("value") if row is not None else hold.get("from")
        return False, old

    def module_version(self, module: Module, channel: str) -> str | None:
        """The version this runtime gets of ``module`` in ``channel`` (``None``: none there)."""
        current = module.version_for(channel)
        hold = (module.rollout_holds or {}).get(channel)
        if not hold:
            return current
        released, old = self.resolve(hold)
        value = current if released else old
        self._note(hold, f"module {module.name} in channel {channel}", value, released)
        return value

    def rolled_back(self, module: Module, channel: str) -> bool:
        """Whether a rollback gave this runtime its old version of ``module`` in ``channel`` (an
        operator's explicit choice: the reconcile does not refuse it as a downgrade)."""
        hold = (module.rollout_holds or {}).get(channel)
        rollout_id = (hold or {}).get("rollout")
        row = self._row(rollout_id) if isinstance(rollout_id, int) else None
        return row is not None and row.state == TargetState.ROLLED_BACK

    def watcher_entry(self, watcher: Any) -> dict[str, Any] | None:
        """The fields this runtime's webhook entry of ``watcher`` is rendered from: ``None`` for
        the Watcher as it is now, else ``{"fields": ... | None}`` (``None``: not there yet)."""
        hold = getattr(watcher, "rollout_hold", None)
        if not hold:
            return None
        released, old = self.resolve(hold)
        self._note(hold, f"Watcher {watcher.key}", "current" if released else "previous", released)
        return None if released else {"fields": old}

    def _note(self, hold: dict[str, Any], subject: str, value: Any, released: bool) -> None:
        rollout_id = hold.get("rollout")
        if isinstance(rollout_id, int) and not any(h.rollout_id == rollout_id for h in self.held):
            member = self._rows is not None and rollout_id in self._rows
            self.held.append(Held(rollout_id, subject, str(value), released, member))
