"""Which runtime goes in which wave.

The runtimes of a rollout are put in a stable pseudo-random order (a hash of the rollout's name and
the runtime's uid: the canary is not always the same runtime, and a rollout planned again puts
them in the same order). Each wave then takes, in that order, the runtimes its ``selector`` selects
among those no earlier wave took, until the wave's size is reached: a count adds that many, a
share ("25%") brings the runtimes taken so far to that share of all of them. The last wave (100 %,
no selector) takes the rest. Waves left empty (small fleets, a selector that selects nothing) stay
in the plan and are passed at once.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fleet.models.rollout import wave_goal
from kernel.documents.selectors import selects


@dataclass(frozen=True)
class Member:
    """A runtime the rollout concerns: its Kyma, labels (for selectors) and its own old target."""

    kyma_id: int
    uid: str
    labels: dict[str, str]
    from_value: Any


def _order(rollout_name: str, member: Member) -> str:
    return hashlib.sha256(f"{rollout_name}/{member.uid}".encode()).hexdigest()


def assign(rollout_name: str, waves: Sequence[dict[str, Any]], members: Sequence[Member]) -> list[int]:
    """The wave of each member (same order as ``members``)."""
    ordered = sorted(range(len(members)), key=lambda i: _order(rollout_name, members[i]))
    wave_of = [-1] * len(members)
    assigned = 0
    total = len(members)
    for index, wave in enumerate(waves):
        goal = wave_goal(wave["size"], assigned, total)
        for position in ordered:
            if assigned >= goal:
                break
            if wave_of[position] >= 0 or not selects(wave.get("selector"), members[position].labels):
                continue
            wave_of[position] = index
            assigned += 1
    last = len(waves) - 1
    return [wave if wave >= 0 else last for wave in wave_of]
