"""The module catalog's kind of change: a module's version in a channel.

A new version of ``keda`` in channel ``regular`` concerns every Kyma that enables keda in that
channel (its own, else the Kyma's). When there are more than one, the new version goes out in a
rollout (``fleet.services.modules.version_change``, from ``module_save``), with the policy of
``ROLLOUT_POLICY["ModuleVersion"]`` and the module's own ``spec.rolloutPolicy`` over it. The mark on
``Module.rollout_holds`` keeps the old version for runtimes whose wave has not started; a runtime
is judged from its Kyma's ``status.modules`` entry of the module: the new version Ready (its
manager reported on it), Error, or held by its maintenance window (``maintenance: true``: Waiting
until the window opens). A version that cannot reach the runtime at all, as when no window can
come (no policy, or none for this runtime), is Failed with the reason: waiting would hold the wave
for ever, since a Waiting runtime has no time limit.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.utils import timezone

from fleet import maintenance
from fleet.models import Kyma, KymaState, Module, Rollout, RolloutKind, RolloutTarget
from fleet.models.kyma import CHANNEL_SCHEMA
from fleet.models.module import VERSION_SCHEMA
from fleet.selectors import module_channel_of, module_users
from fleet.services.modules import module_save
from kernel.documents import schema
from kernel.errors import ValidationFailed

from .kinds import NOT_YET, Subject, Verdict, reconciled_since, register
from .services import ByHand, holding


def module_channel(subject: str) -> tuple[str, str]:
    module, _, channel = subject.partition("/")
    return module, channel


# What a rollout made by hand of a module's version says (``spec.change``), with the catalog's own
# schemas for a channel and a version.
CHANGE_SCHEMA = schema.obj(
    {
        "kind": schema.enum(RolloutKind.MODULE_VERSION),
        "module": schema.string(min_length=1, max_length=63),
        "channel": CHANNEL_SCHEMA,
        "version": VERSION_SCHEMA,
    },
    required=("module", "channel", "version"),
)


class ModuleVersionSubject(Subject):
    kind = RolloutKind.MODULE_VERSION

    def describe(self, rollout: Rollout) -> str:
        module, channel = module_channel(rollout.subject)
        old, new = rollout.from_value.get("value"), rollout.to_value.get("value")
        return f"module {module} in channel {channel}: {old or 'none'} → {new or 'none'}"

    def _module(self, rollout: Rollout) -> Module | None:
        name, _ = module_channel(rollout.subject)
        return Module.objects.select_for_update().filter(name=name).first()

    def hold(self, rollout: Rollout) -> None:
        module = self._module(rollout)
        if module is None:
            return
        _, channel = module_channel(rollout.subject)
        holds = dict(module.rollout_holds or {})
        holds[channel] = {"rollout": rollout.pk, "from": rollout.from_value.get("value")}
        Module.objects.filter(pk=module.pk).update(rollout_holds=holds)

    def unhold(self, rollout: Rollout) -> None:
        module = self._module(rollout)
        if module is None:
            return
        _, channel = module_channel(rollout.subject)
        holds = dict(module.rollout_holds or {})
        if (holds.get(channel) or {}).get("rollout") == rollout.pk:
            del holds[channel]
            Module.objects.filter(pk=module.pk).update(rollout_holds=holds)

    def complete(self, rollout: Rollout) -> list[int]:
        module, channel = module_channel(rollout.subject)
        members = set(rollout.targets.values_list("kyma_id", flat=True))
        return [m.kyma_id for m in module_users(module, channel) if m.kyma_id not in members]

    def prefetch(self, rollout: Rollout, kymas: Iterable[Kyma]) -> maintenance.PolicyInForce:
        return maintenance.policy_in_force()

    def judge(self, rollout: Rollout, target: RolloutTarget, kyma: Kyma, extra: Any) -> Verdict:
        module, channel = module_channel(rollout.subject)
        new = rollout.to_value.get("value")
        if not reconciled_since(target, kyma):
            return NOT_YET
        if module_channel_of(kyma.channel, kyma.modules, module) != channel:
            return Verdict("Excluded", f"no longer uses {module} in channel {channel}")
        entry = next(
            (m for m in kyma.module_status or () if isinstance(m, dict) and m.get("name") == module), None
        )
        if entry is None:
            return NOT_YET
        if entry.get("maintenance"):
            window = maintenance.window_of(kyma, timezone.now(), extra)
            if window.upcoming is None:  # the policy changed since the reconcile: no window will come
                cause = f"{module} {new} requires downtime and no maintenance window will open"
                return Verdict("Failed", f"{cause}: {window.problem}"[:1000])
            message = entry.get("message") or "waiting for its maintenance window"
            return Verdict("Waiting", message, window.upcoming.begin)
        if entry.get("version") != new:
            if entry.get("state") == KymaState.ERROR:
                # reconciled since its release, yet the new version could not be handed out (no
                # maintenance window can come, the catalog lost it): it will not get there by waiting
                return Verdict("Failed", f"{module} {new}: {entry.get('message') or 'Error'}"[:1000])
            return NOT_YET
        if entry.get("state") == KymaState.READY:
            return Verdict("Ready")
        if entry.get("state") == KymaState.ERROR:
            return Verdict("Failed", f"{module} {new}: {entry.get('message') or 'Error'}"[:1000])
        return Verdict("Progressing")

    def start_by_hand(
        self,
        change: dict[str, Any],
        *,
        name: str,
        waves: list[dict[str, Any]] | None,
        gate: dict[str, Any] | None,
        user: Any,
    ) -> Rollout:
        """Set the channel's version in the catalog and send it out with these waves and gate
        (instead of the policy's), even to one runtime: the catalog's own write (``module_save``)
        with a rollout made by hand."""
        problems = schema.schema_errors(CHANGE_SCHEMA, change, "spec.change")
        module = Module.objects.select_for_update().filter(name=change.get("module")).first()
        if module is None and not any(path == "spec.change.module" for path, _ in problems):
            problems.append(("spec.change.module", f"no module {change.get('module')!r} in the catalog"))
        if problems:
            raise ValidationFailed("invalid change", errors=problems)
        channel, version = change["channel"], change["version"]
        if module.channels.get(channel) == version:
            raise ValidationFailed(
                "nothing to roll out",
                errors=[
                    ("spec.change.version", f"{module.name} is at {version} in channel {channel} already")
                ],
            )
        module.channels = {**module.channels, channel: version}
        try:
            module_save(module=module, by_hand=ByHand(name=name, waves=waves, gate=gate, user=user))
        except ValidationFailed as exc:
            raise exc.remap({"channels": "spec.change"}) from exc
        rollout = holding(RolloutKind.MODULE_VERSION, f"{module.name}/{channel}")
        assert rollout is not None  # by hand: even for one runtime, or none
        return rollout


register(ModuleVersionSubject())
