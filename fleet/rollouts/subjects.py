"""The module catalog's kind of change: a module's version in a channel.

A new version of ``keda`` in channel ``regular`` concerns every Kyma that enables keda in that
channel (its own, else the Kyma's). When there are more than one, the new version goes out in a
rollout (:func:`module_versions_changed`, from ``module_save``), with the policy of
``ROLLOUT_POLICY["ModuleVersion"]`` and the module's own ``spec.rolloutPolicy`` over it. The mark on
``Module.rollout_holds`` keeps the old version for runtimes whose wave has not started; a runtime
is judged from its Kyma's ``status.modules`` entry of the module: the new version Ready (its
manager reported on it), Error, or held by its maintenance window (``maintenance: true``: Waiting
until the window opens). A version that cannot reach the runtime at all, as when no window can
come (no policy, or none for this runtime), is Failed with the reason: waiting would hold the wave
for ever, since a Waiting runtime has no time limit.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from django.utils import timezone

from fleet import maintenance
from fleet.models import Kyma, KymaState, Module, Rollout, RolloutKind, RolloutTarget
from fleet.models.kyma import DEFAULT_CHANNEL
from fleet.models.module import VERSION
from fleet.models.rollout import effective_policy
from kernel.documents import schema
from kernel.errors import ValidationFailed
from kernel.services import resource_save, stored_spec

from .kinds import NOT_YET, Subject, Verdict, reconciled_since, register
from .planning import Member
from .services import Change, rollout_start


def module_channel(subject: str) -> tuple[str, str]:
    module, _, channel = subject.partition("/")
    return module, channel


def uses(kyma_channel: str, modules: Any, module: str) -> str | None:
    """The channel in which a Kyma's spec enables ``module`` (``None``: it does not)."""
    for entry in modules or ():
        if isinstance(entry, dict) and entry.get("name") == module:
            return entry.get("channel") or kyma_channel or DEFAULT_CHANNEL
    return None


def module_users(module: str, channel: str) -> list[Member]:
    """Kymas (not being deleted) that enable ``module`` in ``channel``."""
    rows = Kyma.objects.filter(deletion_timestamp__isnull=True).values_list(
        "id", "uid", "labels", "channel", "modules"
    )
    return [
        Member(kyma_id, str(uid), labels or {}, None)
        for kyma_id, uid, labels, kyma_channel, modules in rows.iterator(chunk_size=2000)
        if uses(kyma_channel, modules, module) == channel
    ]


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
        if uses(kyma.channel, kyma.modules, module) != channel:
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
        (instead of the policy's), even to one runtime."""
        module_name, channel, version = (change.get(key) for key in ("module", "channel", "version"))
        module = Module.objects.select_for_update().filter(name=module_name).first()
        problems = []
        if module is None:
            problems.append(("spec.change.module", f"no module {module_name!r} in the catalog"))
        if (
            not isinstance(channel, str)
            or not re.fullmatch(schema.CHANNEL, channel)
            or not 3 <= len(channel) <= 32
        ):
            problems.append(("spec.change.channel", "a channel: 3 to 32 lower-case letters"))
        if not isinstance(version, str) or not re.fullmatch(VERSION, version):
            problems.append(("spec.change.version", "a semantic version (1.2.3), at most 32 characters"))
        if problems:
            raise ValidationFailed("invalid change", errors=problems)
        old = module.channels.get(channel)
        if old == version:
            raise ValidationFailed(
                "nothing to roll out",
                errors=[
                    ("spec.change.version", f"{module_name} is at {version} in channel {channel} already")
                ],
            )
        before = stored_spec(module)
        module.channels = {**module.channels, channel: version}
        try:
            resource_save(module, before=before)
        except ValidationFailed as exc:
            raise exc.remap({"channels": "spec.change"}) from exc
        members = [Member(m.kyma_id, m.uid, m.labels, old) for m in module_users(module.name, channel)]
        rollout = rollout_start(
            change=Change(
                kind=RolloutKind.MODULE_VERSION,
                subject=f"{module.name}/{channel}",
                change={
                    "kind": RolloutKind.MODULE_VERSION,
                    "module": module.name,
                    "channel": channel,
                    "version": version,
                },
                from_value=old,
                to_value=version,
                members=members,
                policy=effective_policy(RolloutKind.MODULE_VERSION, module.rollout_policy),
            ),
            name=name,
            automatic=False,
            created_by=user,
            waves=waves,
            gate=gate,
        )
        assert rollout is not None  # by hand: even for one runtime, or none
        return rollout


register(ModuleVersionSubject())


def module_versions_changed(module: Module, before: dict[str, str]) -> set[int]:
    """Start a rollout for each channel whose version changed (inside ``module_save``'s
    transaction); returns the Kymas left to those rollouts (their waves queue their reconciles)."""
    held: set[int] = set()
    policy = effective_policy(RolloutKind.MODULE_VERSION, module.rollout_policy)
    for channel, version in sorted(module.channels.items()):
        old = before.get(channel)
        if old is None or old == version:
            continue
        members = [Member(m.kyma_id, m.uid, m.labels, old) for m in module_users(module.name, channel)]
        rollout = rollout_start(
            change=Change(
                kind=RolloutKind.MODULE_VERSION,
                subject=f"{module.name}/{channel}",
                change={
                    "kind": RolloutKind.MODULE_VERSION,
                    "module": module.name,
                    "channel": channel,
                    "version": version,
                },
                from_value=old,
                to_value=version,
                members=members,
                policy=policy,
            ),
            name=f"{module.name}-{channel}-{version}",
        )
        if rollout is not None:
            held.update(m.kyma_id for m in members)
    return held
