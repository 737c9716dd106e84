"""The Rollout document (``controlplane.kyma-project.io/v1alpha1``), for ``apply``, ``get`` and the
API. Rollouts of a module version, a Watcher or runtime-watcher settings are made by their change;
one applied by hand (``spec.change``: a module version, runtime-watcher settings, or a change of
many Kymas' spec) makes its change and sends it out with its own ``spec.waves`` and
``spec.gate`` (else the policy's). An existing rollout's document may only flip ``spec.paused``
(pause, resume); its change, waves and gate are what it was made with.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from django.core.exceptions import ValidationError
from django.db.models import QuerySet

from fleet.models import Rollout, RolloutKind, RolloutTarget
from fleet.models.rollout import GATE_SCHEMA, WAVES_SCHEMA, validate_waves, wave_name
from fleet.rollouts import services as rollout_services
from fleet.rollouts.kinds import subject_for
from kernel.documents import schema
from kernel.documents.registry import ResourceKind, register
from kernel.errors import ValidationFailed
from kernel.timefmt import rfc3339

from .kinds import FLEET_API_VERSION

CHANGE_SCHEMA = {
    "type": "object",
    "properties": {"kind": schema.enum(*RolloutKind.values)},
    "required": ["kind"],
}


def _time(value: Any) -> str | None:
    return rfc3339(value) if value else None


def rollout_status(rollout: Rollout) -> dict[str, Any]:
    """Where the rollout stands, wave by wave (one query for the counts)."""
    counts: dict[int, Counter] = {}
    for wave, state in RolloutTarget.objects.filter(rollout=rollout).values_list("wave", "state"):
        counts.setdefault(wave, Counter())[state] += 1
    total: Counter = Counter()
    for wave_counts in counts.values():
        total.update(wave_counts)
    subject = subject_for(rollout.kind)
    status: dict[str, Any] = {
        "state": rollout.state,
        "createdBy": "change" if rollout.automatic else "hand",
        "message": rollout.message,
        "change": subject.describe(rollout),
        "runtimes": rollout.runtimes,
        "currentWave": rollout.current_wave + 1 if rollout.current_wave >= 0 else 0,
        "counts": dict(sorted(total.items())),
        "waves": [
            {
                "name": wave_name(wave, index),
                "runtimes": sum(counts.get(index, Counter()).values()),
                "counts": dict(sorted(counts.get(index, Counter()).items())),
            }
            for index, wave in enumerate(rollout.waves)
        ],
    }
    if rollout.halted_reason:
        status["haltedReason"] = rollout.halted_reason
    for key, value in (("finishedAt", rollout.finished_at), ("waveStartedAt", rollout.wave_started_at)):
        if value:
            status[key] = _time(value)
    if rollout.superseded_by_id:
        status["supersededBy"] = rollout.superseded_by.name
    return status


@register
class RolloutKindDocument(ResourceKind):
    """A change going out to many runtimes in waves."""

    api_version = FLEET_API_VERSION
    kind = "Rollout"
    plural = "rollouts"
    aliases = ("rollout", "ro")
    namespaced = False
    model = Rollout
    apply_order = 60  # after the catalog and the Kymas a change may name
    field_paths = {
        "change": "spec.change",
        "waves": "spec.waves",
        "gate": "spec.gate",
        "paused": "spec.paused",
    }

    def spec_schema(self) -> dict:
        return schema.obj(
            {"change": CHANGE_SCHEMA, "waves": WAVES_SCHEMA, "gate": GATE_SCHEMA, "paused": schema.BOOLEAN},
            required=("change",),
        )

    def extra_columns(self) -> list:
        return [
            ("KIND", lambda r: r.kind),
            ("SUBJECT", lambda r: r.subject),
            ("STATE", lambda r: r.state),
            ("WAVE", lambda r: r.wave_label()),
        ]

    def queryset(self) -> QuerySet:
        return Rollout.objects.select_related("superseded_by")

    def _apply(self, doc: dict[str, Any]) -> tuple[Rollout, bool]:
        spec, name = doc.get("spec") or {}, doc["metadata"]["name"]
        existing = Rollout.objects.filter(name=name).first()
        if existing is not None:
            return self._update(existing, spec), False
        waves = spec.get("waves")
        if waves is not None:
            try:
                validate_waves(waves, "spec.waves")
            except ValidationError as exc:
                raise ValidationFailed("invalid waves", errors=[("", m) for m in exc.messages]) from exc
        try:
            subject = subject_for(spec["change"]["kind"])
        except LookupError as exc:
            raise ValidationFailed(str(exc), errors=[("spec.change.kind", str(exc))]) from exc
        rollout = subject.start_by_hand(
            spec["change"], name=name, waves=waves, gate=spec.get("gate"), user=None
        )
        if spec.get("paused"):
            rollout = rollout_services.rollout_pause(rollout=rollout)
        return rollout, True

    @staticmethod
    def _update(rollout: Rollout, spec: dict[str, Any]) -> Rollout:
        problems = []
        if spec.get("change") != rollout.change:
            problems.append(
                (
                    "spec.change",
                    "a rollout's change cannot change: apply a new Rollout (it supersedes this one)",
                )
            )
        if "waves" in spec and spec["waves"] != rollout.waves:
            problems.append(("spec.waves", "the waves of a rollout under way cannot change"))
        if any(rollout.gate.get(key) != value for key, value in (spec.get("gate") or {}).items()):
            problems.append(("spec.gate", "the gate of a rollout under way cannot change"))
        if problems:
            raise ValidationFailed("a rollout's spec is fixed when it is made", errors=problems)
        paused = bool(spec.get("paused", False))
        if paused and not rollout.paused:
            return rollout_services.rollout_pause(rollout=rollout)
        if not paused and rollout.paused:
            return rollout_services.rollout_resume(rollout=rollout)
        return rollout

    def to_document(self, rollout: Rollout) -> dict[str, Any]:
        spec = {
            "change": rollout.change,
            "waves": rollout.waves,
            "gate": rollout.gate,
            "paused": rollout.paused,
        }
        return {
            **self.header(),
            "metadata": self.metadata(rollout),
            "spec": spec,
            "status": rollout_status(rollout),
        }
