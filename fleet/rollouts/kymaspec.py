"""A change of many Kymas' spec, made by hand: the "anything else" a rollout can carry.

Switching hundreds of runtimes to another channel, or enabling (or removing) a module in all
trial runtimes, reaches many runtimes just like a new version does, but no single edit of the
control plane says it. A Rollout document says it::

    spec:
      change:
        kind: KymaSpec
        selector: {matchLabels: {kyma-project.io/broker-plan-name: trial}}   # which Kymas ({}: all)
        channel: fast                                   # optional
        enableModules: [{name: serverless}]             # optional, Kyma module entries
        disableModules: [keda]                          # optional, module names

Each wave edits its Kymas' spec (the same service as any edit, so each is reconciled) and is
judged by the whole runtime: Ready with that spec. A roll back takes back only what the rollout
did (the channel if it is still the one set, modules it enabled, entries it removed), so a user's
own edit since is kept. Kymas that are not in a started wave are not touched at all.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction

from fleet.models import Kyma, Rollout, RolloutKind, RolloutTarget
from fleet.models.kyma import CHANNEL_SCHEMA, MODULE_SCHEMA
from fleet.models.rollout import effective_policy
from fleet.services import kymas as kyma_services
from kernel.documents import schema
from kernel.documents.selectors import describe, selects
from kernel.errors import ApplicationError, ValidationFailed

from .kinds import Subject, judge_kyma, register
from .planning import Member
from .services import Change, rollout_start

CHANGE_SCHEMA = schema.obj(
    {
        "kind": {"const": RolloutKind.KYMA_SPEC},
        "selector": schema.LABEL_SELECTOR,
        "namespace": schema.string(pattern=schema.DNS_LABEL),
        "channel": CHANNEL_SCHEMA,
        "enableModules": {"type": "array", "items": MODULE_SCHEMA, "maxItems": 50},
        "disableModules": {"type": "array", "items": schema.string(pattern=schema.DNS_LABEL), "maxItems": 50},
    },
    required=("kind", "selector"),
)


def patched(kyma: Kyma, change: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    """The Kyma's channel and modules with ``change`` applied."""
    channel = change.get("channel") or kyma.channel
    dropped = set(change.get("disableModules") or ())
    enabled = {entry["name"]: entry for entry in change.get("enableModules") or ()}
    modules = [m for m in kyma.modules if m.get("name") not in dropped and m.get("name") not in enabled]
    return channel, [*modules, *enabled.values()]


def restored(kyma: Kyma, change: dict[str, Any], before: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    """Take back what ``change`` did, and only that."""
    channel = kyma.channel
    if change.get("channel") and kyma.channel == change["channel"]:
        channel = before.get("channel") or kyma.channel
    enabled = {entry["name"] for entry in change.get("enableModules") or ()}
    had = {m.get("name"): m for m in before.get("modules") or ()}
    modules = [m for m in kyma.modules if m.get("name") not in enabled or m.get("name") in had]
    present = {m.get("name") for m in modules}
    for name in change.get("disableModules") or ():
        if name in had and name not in present:
            modules.append(had[name])
    return channel, modules


class KymaSpecSubject(Subject):
    kind = RolloutKind.KYMA_SPEC

    def describe(self, rollout: Rollout) -> str:
        change = rollout.change
        parts = []
        if change.get("channel"):
            parts.append(f"channel → {change['channel']}")
        parts += [f"enable {entry['name']}" for entry in change.get("enableModules") or ()]
        parts += [f"disable {name}" for name in change.get("disableModules") or ()]
        where = describe(change.get("selector")) or "every Kyma"
        return f"Kymas ({where}): {', '.join(parts) or 'no change'}"

    def release(self, rollout: Rollout, targets: list[RolloutTarget]) -> None:
        for kyma in Kyma.objects.filter(pk__in=[t.kyma_id for t in targets]):
            self._save(kyma, *patched(kyma, rollout.change))

    def roll_back(self, rollout: Rollout, targets: list[RolloutTarget]) -> None:
        before = {t.kyma_id: (t.from_value or {}).get("value") or {} for t in targets}
        for kyma in Kyma.objects.filter(pk__in=list(before)):
            self._save(kyma, *restored(kyma, rollout.change, before[kyma.pk]))

    @staticmethod
    def _save(kyma: Kyma, channel: str, modules: list[dict[str, Any]]) -> None:
        if kyma.is_deleting or (kyma.channel, kyma.modules) == (channel, modules):
            return
        kyma.channel, kyma.modules = channel, modules
        try:
            with transaction.atomic():
                kyma_services.kyma_save(kyma=kyma)
        except ApplicationError:  # one Kyma's spec refused must not stop the wave: it fails there
            kyma.refresh_from_db()

    def start_by_hand(
        self,
        change: dict[str, Any],
        *,
        name: str,
        waves: list[dict[str, Any]] | None,
        gate: dict[str, Any] | None,
        user: Any,
    ) -> Rollout:
        problems = schema.schema_errors(CHANGE_SCHEMA, change, "spec.change")
        if not problems and not (
            change.get("channel") or change.get("enableModules") or change.get("disableModules")
        ):
            problems = [("spec.change", "say what changes: channel, enableModules or disableModules")]
        if problems:
            raise ValidationFailed("invalid change", errors=problems)
        kymas = Kyma.objects.filter(deletion_timestamp__isnull=True)
        if change.get("namespace"):
            kymas = kymas.filter(namespace=change["namespace"])
        members = [
            Member(kyma.pk, str(kyma.uid), kyma.labels, {"channel": kyma.channel, "modules": kyma.modules})
            for kyma in kymas.only("id", "uid", "labels", "channel", "modules")
            if selects(change.get("selector"), kyma.labels)
        ]
        rollout = rollout_start(
            change=Change(
                kind=RolloutKind.KYMA_SPEC,
                subject=f"kymas:{name}",
                change=change,
                from_value=None,
                to_value=None,
                members=members,
                policy=effective_policy(RolloutKind.KYMA_SPEC),
            ),
            name=name,
            automatic=False,
            created_by=user,
            waves=waves,
            gate=gate,
        )
        assert rollout is not None
        return rollout

    def judge(self, rollout: Rollout, target: RolloutTarget, kyma: Kyma, extra: Any) -> Any:
        return judge_kyma(target, kyma)


register(KymaSpecSubject())
