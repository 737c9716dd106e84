"""Rollouts of this app's changes: a Watcher's webhook, and the runtime watcher's settings.

A Watcher change (a new Watcher, or a spec that changes its webhook entry) concerns every runtime:
when there are more than one, the new entry goes out in a rollout (``ROLLOUT_POLICY["Watcher"]``).
Runtimes not yet in its waves keep the entry as it was (``Watcher.rollout_hold`` keeps its
fields; a new Watcher's webhook is not there yet). A runtime passes when its reconcile applied the
new entry (the Kyma's ``applied_watchers`` carries its mark) and the runtime watcher is Ready.

The runtime watcher's settings (:mod:`.runtime_config`) are moved Kyma by Kyma
(the Kyma's ``WatcherSettingsPin``); a runtime passes when its watcher is Ready with them.
"""

from __future__ import annotations

import uuid
from typing import Any

from fleet.models import Kyma, KymaState, Rollout, RolloutKind, RolloutTarget, RuntimeWatcherSettings
from fleet.models.rollout import effective_policy
from fleet.rollouts.kinds import NOT_YET, Subject, Verdict, judge_kyma, reconciled_since, register
from fleet.rollouts.planning import Member
from fleet.rollouts.services import Change, rollout_start
from fleet.services.watcher_pins import watcher_settings_pin
from kernel.documents import schema
from kernel.errors import ValidationFailed

from . import runtime_config
from .models import Watcher
from .rendering import WatcherConfig
from .status import rollout_mark, webhook_problem

ENTRY_FIELDS = ("namespace", "name", "component", "labels", *Watcher.SPEC_FIELDS)


def entry_fields(watcher: Watcher) -> dict[str, Any]:
    """What the Watcher's webhook entry is rendered from (kept while a rollout holds it)."""
    return {"uid": str(watcher.uid), **{name: getattr(watcher, name) for name in ENTRY_FIELDS}}


def watcher_from_fields(fields: dict[str, Any]) -> Watcher:
    """An unsaved Watcher as it was (only for rendering its webhook entry)."""
    values = {name: fields[name] for name in ENTRY_FIELDS if name in fields}
    return Watcher(uid=uuid.UUID(fields["uid"]), **values)


def watcher_changed(watcher: Watcher, before: Watcher | None) -> Rollout | None:
    """Roll a changed webhook entry out (``None``: it reaches every runtime at once)."""
    if webhook_problem(watcher):
        return None  # left out of every runtime anyway (its status says why)
    old = entry_fields(before) if before is not None and not webhook_problem(before) else None
    if old is not None and rollout_mark(before) == rollout_mark(watcher):
        return None
    rows = Kyma.objects.filter(deletion_timestamp__isnull=True).values_list("id", "uid", "labels")
    members = [Member(pk, str(uid), labels or {}, old) for pk, uid, labels in rows]
    new = entry_fields(watcher)
    return rollout_start(
        change=Change(
            kind=RolloutKind.WATCHER,
            subject=watcher.key,
            change={"kind": RolloutKind.WATCHER, "watcher": watcher.key, "generation": watcher.generation},
            from_value=old,
            to_value=new,
            members=members,
            policy=effective_policy(RolloutKind.WATCHER),
        ),
        name=f"watcher-{watcher.namespace}-{watcher.name}-{watcher.generation}",
    )


def _ready_webhook(kyma: Kyma) -> bool:
    return kyma.condition("SKRWebhook") is not None and kyma.condition("SKRWebhook").get("status") == "True"


class WatcherSubject(Subject):
    kind = RolloutKind.WATCHER

    def label(self, value: Any) -> str:
        if not value:
            return "none"
        spec = {name: value.get(name) for name in ("resource_to_watch", "labels_to_watch", "field")}
        return f"{spec}"

    def describe(self, rollout: Rollout) -> str:
        new = "new webhook" if not rollout.from_value.get("value") else "changed webhook"
        generation = rollout.change.get("generation")
        return f"Watcher {rollout.subject}: {new} (generation {generation}) in every runtime"

    def _row(self, rollout: Rollout) -> Watcher | None:
        uid = (rollout.to_value.get("value") or {}).get("uid")
        return Watcher.objects.select_for_update().filter(uid=uid).first() if uid else None

    def hold(self, rollout: Rollout) -> None:
        watcher = self._row(rollout)
        if watcher is not None:
            hold = {"rollout": rollout.pk, "from": rollout.from_value.get("value")}
            Watcher.objects.filter(pk=watcher.pk).update(rollout_hold=hold)

    def unhold(self, rollout: Rollout) -> None:
        watcher = self._row(rollout)
        if watcher is not None and (watcher.rollout_hold or {}).get("rollout") == rollout.pk:
            Watcher.objects.filter(pk=watcher.pk).update(rollout_hold=None)

    def complete(self, rollout: Rollout) -> list[int]:
        members = set(rollout.targets.values_list("kyma_id", flat=True))
        ids = Kyma.objects.filter(deletion_timestamp__isnull=True).values_list("id", flat=True)
        return [kyma_id for kyma_id in ids if kyma_id not in members]

    def judge(self, rollout: Rollout, target: RolloutTarget, kyma: Kyma, extra: Any) -> Verdict:
        failed = judge_kyma(target, kyma)
        if failed.state == "Failed":
            return failed
        if not reconciled_since(target, kyma):
            return NOT_YET
        mark = rollout_mark(watcher_from_fields(rollout.to_value["value"]))
        if mark in (kyma.applied_watchers or ()) and _ready_webhook(kyma) and kyma.state == KymaState.READY:
            return Verdict("Ready")
        return NOT_YET


class RuntimeWatcherSubject(Subject):
    kind = RolloutKind.RUNTIME_WATCHER

    def label(self, value: Any) -> str:
        config = runtime_config.config_of(value) if isinstance(value, str) and value else None
        return config.image if config is not None else (value or "—")[:12]

    def describe(self, rollout: Rollout) -> str:
        old, new = rollout.from_value.get("value"), rollout.to_value.get("value")
        return f"runtime watcher: {self.label(old)} → {self.label(new)} (settings {str(new)[:12]})"

    def release(self, rollout: Rollout, targets: list[RolloutTarget]) -> None:
        watcher_settings_pin(kyma_ids=[t.kyma_id for t in targets], digest=rollout.to_value["value"])

    def roll_back(self, rollout: Rollout, targets: list[RolloutTarget]) -> None:
        by_value: dict[str, list[int]] = {}
        for target in targets:
            value = (target.from_value or {}).get("value") or rollout.from_value.get("value")
            by_value.setdefault(value, []).append(target.kyma_id)
        for value, ids in by_value.items():
            watcher_settings_pin(kyma_ids=ids, digest=value)

    def complete(self, rollout: Rollout) -> list[int]:
        new = rollout.to_value["value"]
        runtime_config.make_default(new)
        left = list(
            Kyma.objects.filter(deletion_timestamp__isnull=True)
            .exclude(watcher_settings_pin__digest=new)
            .values_list("id", flat=True)
        )
        watcher_settings_pin(kyma_ids=left, digest=new)
        return left

    def judge(self, rollout: Rollout, target: RolloutTarget, kyma: Kyma, extra: Any) -> Verdict:
        verdict = judge_kyma(target, kyma)
        if verdict.state == "Ready" and not _ready_webhook(kyma):
            return NOT_YET
        return verdict

    def start_by_hand(
        self,
        change: dict[str, Any],
        *,
        name: str,
        waves: list[dict[str, Any]] | None,
        gate: dict[str, Any] | None,
        user: Any,
    ) -> Rollout:
        """The fleet's settings with the given ones over them (``image``, ``kcpAddr``, ...), sent
        out with these waves and gate: e.g. back to an image seen before."""
        problems = schema.schema_errors(SETTINGS_CHANGE_SCHEMA, change, "spec.change")
        if problems:
            raise ValidationFailed("invalid change", errors=problems)
        current = runtime_config.fleet_digest()
        base = runtime_config.config_of(current) or WatcherConfig.from_settings()
        config = WatcherConfig.from_dict(
            {**base.as_dict(), **{k: v for k, v in change.items() if k != "kind"}}
        )
        if config.digest == current:
            raise ValidationFailed(
                "nothing to roll out",
                errors=[("spec.change", "the fleet's runtime watchers run these settings already")],
            )
        RuntimeWatcherSettings.objects.get_or_create(
            digest=config.digest, defaults={"settings": config.as_dict()}
        )
        rollout = runtime_config.settings_rollout(
            current, config.digest, automatic=False, created_by=user, name=name, waves=waves, gate=gate
        )
        assert rollout is not None
        return rollout


SETTINGS_CHANGE_SCHEMA = schema.obj(
    {
        "kind": {"const": RolloutKind.RUNTIME_WATCHER},
        "image": schema.string(min_length=1, max_length=500),
        "kcpAddr": schema.string(min_length=1, max_length=300),
        "heartbeatInterval": {"type": "integer", "minimum": 1},
        "cpuLimit": schema.string(min_length=1, max_length=32),
        "memoryLimit": schema.string(min_length=1, max_length=32),
    },
    required=("kind",),
)


register(WatcherSubject())
register(RuntimeWatcherSubject())
