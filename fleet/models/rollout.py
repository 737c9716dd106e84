"""Rollouts: a change that reaches many runtimes goes out in waves, with a gate between them.

A **Rollout** carries one change of one *subject* (a module's version in a channel, a Watcher, the
runtime watcher's image and settings, or a change of many Kymas' spec made by hand): the target
the runtimes had (``from_value``) and the one they get (``to_value``), a plan of waves, a gate,
and where it stands. Each runtime it concerns has a **RolloutTarget**: its wave, its own old
target (a runtime a superseded rollout had changed already keeps that one until its wave), and
its state (``Pending`` until its wave starts, then ``Progressing`` until it is judged ``Ready`` or
``Failed``; ``Waiting`` while its maintenance window is closed). **RolloutEvent** rows are the
rollout's timeline. The subject's row names the rollout that holds it (``Module.rollout_holds``,
``Watcher.rollout_hold``, ``Kyma.watcher_settings``), so the reconcile of a runtime renders that
runtime's own target with the reads it makes anyway (see ``fleet.rollouts.targets``).

Policies (which waves, which gate) are validated here, the same way for the setting
``ROLLOUT_POLICY``, a Module's ``spec.rolloutPolicy`` and a Rollout document's own waves.
"""

from __future__ import annotations

import math
import re
from typing import Any, ClassVar

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models

from kernel.documents import schema
from kernel.models import ResourceModel


class RolloutKind(models.TextChoices):
    MODULE_VERSION = "ModuleVersion", "Module version in a channel"
    WATCHER = "Watcher", "Watcher"
    RUNTIME_WATCHER = "RuntimeWatcher", "Runtime watcher image and settings"
    KYMA_SPEC = "KymaSpec", "Kymas' spec (by hand)"


class RolloutState(models.TextChoices):
    PROGRESSING = "Progressing"
    PAUSED = "Paused"
    HALTED = "Halted"  # a gate failed: the operator resumes, aborts or rolls back
    COMPLETED = "Completed"
    ABORTED = "Aborted"  # stopped where it was: changed runtimes keep the new target, others the old
    ROLLED_BACK = "RolledBack"  # every runtime has the old target again
    SUPERSEDED = "Superseded"  # a newer change of the same subject took over


# Not finished: waves may still go out.
ACTIVE_STATES = frozenset({RolloutState.PROGRESSING, RolloutState.PAUSED, RolloutState.HALTED})
# Its subject's runtimes still get the target it says (old or new, runtime by runtime).
HOLDING_STATES = ACTIVE_STATES | {RolloutState.ABORTED, RolloutState.ROLLED_BACK}


class TargetState(models.TextChoices):
    PENDING = "Pending"  # its wave has not started: the old target
    PROGRESSING = "Progressing"  # released: reconciled with the new target, not judged yet
    WAITING = "Waiting"  # released, but its maintenance window is closed
    READY = "Ready"
    FAILED = "Failed"
    EXCLUDED = "Excluded"  # released, but not Ready before it: the gate does not count it
    ROLLED_BACK = "RolledBack"


RELEASED_STATES = frozenset(
    {
        TargetState.PROGRESSING,
        TargetState.WAITING,
        TargetState.READY,
        TargetState.FAILED,
        TargetState.EXCLUDED,
    }
)
# Released and not judged yet: the rollout is still changing this runtime ("one at a time").
TOUCHING_STATES = frozenset({TargetState.PROGRESSING, TargetState.WAITING})

# --- policies -------------------------------------------------------------------------------------

PERCENT = re.compile(r"^([1-9][0-9]?|100)%$")
WAVE_SCHEMA = schema.obj(
    {
        "name": schema.string(pattern=schema.DNS_LABEL, max_length=63),
        "size": {
            "oneOf": [
                {"type": "integer", "minimum": 1},
                schema.string(pattern=PERCENT.pattern),
            ]
        },
        "selector": schema.LABEL_SELECTOR,
    },
    required=("size",),
)
WAVES_SCHEMA = {"type": "array", "items": WAVE_SCHEMA, "minItems": 1, "maxItems": 20}
GATE_SCHEMA = schema.obj(
    {
        "timeoutSeconds": {"type": "integer", "minimum": 1},
        "maxErrorRatio": {"type": "number", "minimum": 0, "maximum": 1},
        "bakeSeconds": {"type": "integer", "minimum": 0},
    }
)
POLICY_SCHEMA = schema.obj(
    {
        "strategy": schema.enum("Waves", "AllAtOnce"),
        "waves": WAVES_SCHEMA,
        "gate": GATE_SCHEMA,
        "allAtOnceBelow": {"type": "integer", "minimum": 0},
    }
)
POLICIES_SCHEMA = schema.obj(dict.fromkeys(RolloutKind.values, POLICY_SCHEMA))

DEFAULT_WAVES = [{"name": "canary", "size": 1}, {"size": "5%"}, {"size": "25%"}, {"size": "100%"}]
DEFAULT_GATE = {"timeoutSeconds": 900, "maxErrorRatio": 0.02, "bakeSeconds": 0}
DEFAULT_POLICY = {"strategy": "Waves", "waves": DEFAULT_WAVES, "gate": DEFAULT_GATE, "allAtOnceBelow": 0}
ALL_AT_ONCE = [{"name": "all", "size": "100%"}]


def validate_waves(waves: Any, where: str = "waves") -> None:
    """The schema, then what it cannot say: the last wave takes every runtime left (100 %, no
    selector), and shares grow from wave to wave."""
    schema.SchemaValidator(WAVES_SCHEMA, where)(waves)
    last = waves[-1]
    if last["size"] != "100%" or last.get("selector"):
        raise ValidationError(
            f"{where}[{len(waves) - 1}]: the last wave must be size 100% without a selector"
        )
    share = 0
    for index, wave in enumerate(waves):
        size = wave["size"]
        if isinstance(size, str):
            percent = int(size[:-1])
            if percent < share:
                raise ValidationError(
                    f"{where}[{index}].size: {size} is below an earlier wave's {share}% (shares are of "
                    "the runtimes changed once the wave is done, so they grow)"
                )
            share = percent


def validate_policy(value: Any, where: str = "rolloutPolicy") -> None:
    schema.SchemaValidator(POLICY_SCHEMA, where)(value)
    if value.get("waves"):
        validate_waves(value["waves"], f"{where}.waves")


def validate_policies(value: Any) -> None:
    """``ROLLOUT_POLICY``: a policy per kind of change."""
    schema.SchemaValidator(POLICIES_SCHEMA, "ROLLOUT_POLICY")(value)
    for kind, policy in value.items():
        validate_policy(policy, f"ROLLOUT_POLICY.{kind}")


def effective_policy(kind: str, override: dict | None = None) -> dict[str, Any]:
    """The default, the setting's policy for ``kind`` over it, then ``override`` (a Module's)."""
    policy = {**DEFAULT_POLICY, "gate": dict(DEFAULT_GATE)}
    for layer in ((settings.ROLLOUT_POLICY or {}).get(kind) or {}, override or {}):
        for key, value in layer.items():
            policy[key] = {**policy["gate"], **value} if key == "gate" else value
    return policy


def plan_waves(policy: dict[str, Any], runtimes: int) -> list[dict[str, Any]]:
    """The waves a rollout of ``runtimes`` runtimes uses: the policy's, or one wave of all of them
    ("all at once": the strategy, or a fleet smaller than ``allAtOnceBelow``)."""
    if policy.get("strategy") == "AllAtOnce" or runtimes < policy.get("allAtOnceBelow", 0):
        return [dict(wave) for wave in ALL_AT_ONCE]
    return [dict(wave) for wave in policy.get("waves") or DEFAULT_WAVES]


def wave_goal(size: int | str, assigned: int, total: int) -> int:
    """How many runtimes have been assigned once a wave of ``size`` is: a count adds that many, a
    share ("25%") brings the total to that share of all ``total`` (rounded up)."""
    if isinstance(size, int):
        return min(total, assigned + size)
    return max(assigned, min(total, math.ceil(total * int(size[:-1]) / 100)))


def wave_name(wave: dict[str, Any], index: int) -> str:
    return wave.get("name") or f"wave-{index + 1}"


# --- rows -----------------------------------------------------------------------------------------


class Rollout(ResourceModel):
    """One change going out to many runtimes in waves (see the module docstring)."""

    kind = models.CharField(max_length=16, choices=RolloutKind.choices)
    subject = models.CharField(max_length=300, help_text="What changes: module/channel, a Watcher, ...")
    change = models.JSONField(default=dict, help_text="The change as given (the document's spec.change).")
    from_value = models.JSONField(default=dict, blank=True, help_text="The old target.")
    to_value = models.JSONField(default=dict, blank=True, help_text="The new target.")
    waves = models.JSONField(default=list, validators=[validate_waves])
    gate = models.JSONField(default=dict, validators=[schema.SchemaValidator(GATE_SCHEMA, "gate")])
    paused = models.BooleanField(default=False, help_text="Set: no further wave starts.")
    automatic = models.BooleanField(default=True, help_text="Created by a change, not by hand.")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    state = models.CharField(max_length=16, choices=RolloutState.choices, default=RolloutState.PROGRESSING)
    message = models.CharField(max_length=1000, blank=True)
    halted_reason = models.CharField(max_length=1000, blank=True)
    current_wave = models.IntegerField(default=-1)  # -1: no wave started yet
    runtimes = models.PositiveIntegerField(default=0)
    wave_started_at = models.DateTimeField(null=True, blank=True)
    wave_settled_at = models.DateTimeField(null=True, blank=True)
    # The operator resumed after this wave's gate failed: its failures are accepted.
    gate_accepted = models.BooleanField(default=False)
    finished_at = models.DateTimeField(null=True, blank=True)
    superseded_by = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="supersedes"
    )

    SPEC_FIELDS: ClassVar[tuple[str, ...]] = ("kind", "subject", "change", "waves", "gate", "paused")

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [models.UniqueConstraint(fields=["name"], name="rollout_unique_name")]
        indexes = [
            models.Index(fields=["state", "-created_at"], name="rollout_state_recent"),
            models.Index(fields=["kind", "subject", "state"], name="rollout_subject_state"),
        ]

    @property
    def is_active(self) -> bool:
        return self.state in ACTIVE_STATES

    @property
    def is_holding(self) -> bool:
        return self.state in HOLDING_STATES

    def wave_label(self, index: int | None = None) -> str:
        index = self.current_wave if index is None else index
        if index < 0 or index >= len(self.waves):
            return "—"
        return f"{index + 1}/{len(self.waves)} ({wave_name(self.waves[index], index)})"


class RolloutTarget(models.Model):
    """One runtime of a rollout: its wave, its own old target, and how it is doing."""

    rollout = models.ForeignKey(Rollout, on_delete=models.CASCADE, related_name="targets")
    kyma = models.ForeignKey("controlplane.Kyma", on_delete=models.CASCADE, related_name="rollout_targets")
    wave = models.PositiveIntegerField()
    state = models.CharField(max_length=16, choices=TargetState.choices, default=TargetState.PENDING)
    reason = models.CharField(max_length=1000, blank=True)
    from_value = models.JSONField(default=dict, blank=True)
    released_at = models.DateTimeField(null=True, blank=True)
    judged_at = models.DateTimeField(null=True, blank=True)
    # The time limit runs from the release, or from when its maintenance window opened.
    clock_from = models.DateTimeField(null=True, blank=True)
    window_opens_at = models.DateTimeField(null=True, blank=True)
    was_ready = models.BooleanField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["rollout", "kyma"], name="rollouttarget_unique_kyma")]
        indexes = [
            models.Index(fields=["rollout", "wave", "state"], name="rollouttarget_wave_state"),
            models.Index(fields=["kyma", "state"], name="rollouttarget_kyma_state"),
        ]

    def __str__(self) -> str:
        return f"{self.rollout.name}: {self.kyma_id} ({self.state})"

    @property
    def released(self) -> bool:
        return self.state in RELEASED_STATES


class RolloutEvent(models.Model):
    """One step in a rollout's timeline (created, wave started, gate passed or failed, ...)."""

    rollout = models.ForeignKey(Rollout, on_delete=models.CASCADE, related_name="events")
    at = models.DateTimeField(auto_now_add=True)
    kind = models.CharField(max_length=32)
    wave = models.IntegerField(null=True, blank=True)
    text = models.CharField(max_length=2000)

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [models.Index(fields=["rollout", "-at"], name="rolloutevent_recent")]

    def __str__(self) -> str:
        return f"{self.rollout_id} {self.kind}: {self.text}"


class RuntimeWatcherSettings(models.Model):
    """The runtime watcher's image and settings as a control-plane process had them
    (``WATCHER_IMAGE``, ``WATCHER_KCP_ADDR``, ...), by digest. The first process that starts with
    settings never seen makes them the fleet's new target through a rollout; every process then
    renders each runtime's own (``Kyma.watcher_settings``), whatever its own environment says."""

    digest = models.CharField(max_length=64, unique=True)
    settings = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)
    # The fleet's settings: new runtimes get them (while a rollout of new ones is under way: the old).
    is_default = models.BooleanField(default=False, db_index=True)

    class Meta:
        verbose_name = "runtime-watcher settings"
        verbose_name_plural = "runtime-watcher settings"
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.settings.get('image', '?')} ({self.digest[:12]})"
