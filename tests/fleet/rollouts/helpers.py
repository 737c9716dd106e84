"""A small fleet of emulated runtimes with keda, reconciled in process, and a module manager."""

from __future__ import annotations

from dataclasses import dataclass, field

from django.utils import timezone

from fleet import queue
from fleet.models import Kyma, Module, ModuleConfig, Rollout, RolloutTarget
from fleet.rollouts.engine import rollouts_advance
from fleet.services import modules as module_services
from reconciler.run import kyma_reconcile_run
from runtime_emulator import RuntimeEmulator
from tests.support.runtimes import connected_kyma

MRM = "operator.kyma-project.io/v1beta2/modulereleasemetas"


def reconcile(kyma: Kyma) -> Kyma:
    now = timezone.now()
    queue.flags().claim([kyma.pk], now, now, full=True)
    kyma_reconcile_run(kyma.pk, reason="test")
    kyma.refresh_from_db()
    return kyma


@dataclass
class Fleet:
    """Kymas ``k0``..``kN`` with keda in channel regular, each with its own runtime."""

    kymas: list[Kyma]
    runtimes: list[RuntimeEmulator]
    # What the manager answers per runtime name for a version: {"k3": {"1.1.0": "Error"}}.
    answers: dict[str, dict[str, str]] = field(default_factory=dict)

    def reconcile_all(self) -> None:
        for kyma in self.kymas:
            reconcile(kyma)

    def manager_reports(self) -> None:
        """The module manager: Ready (or the answer set for that runtime and version) for every
        config whose version it has not reported on."""
        for config in ModuleConfig.objects.select_related("kyma"):
            state = self.answers.get(config.kyma.name, {}).get(config.version, "Ready")
            wanted = {"state": state, "message": f"{state} at {config.version}"}
            if config.status != wanted:
                module_services.moduleconfig_set_status(config=config, status=wanted)

    def settle(self, rounds: int = 2) -> None:
        """Reconcile, let the manager answer, reconcile again, advance the rollouts."""
        for _ in range(rounds):
            self.reconcile_all()
            self.manager_reports()
            self.reconcile_all()
            rollouts_advance()

    def version_of(self, kyma: Kyma) -> str:
        return ModuleConfig.objects.get(kyma=kyma).version

    def versions(self) -> dict[str, str]:
        return {kyma.name: self.version_of(kyma) for kyma in self.kymas}

    def mirrored_version(self, index: int) -> str:
        meta = self.runtimes[index].get_object(MRM, "keda", "kyma-system")
        return {c["channel"]: c["version"] for c in meta["spec"]["channels"]}["regular"]


def make_fleet(runtimes, size: int) -> Fleet:
    made = [runtimes() for _ in range(size)]
    kymas = [connected_kyma(runtime, name=f"k{index}") for index, runtime in enumerate(made)]
    fleet = Fleet(kymas, made)
    fleet.settle(1)
    return fleet


def new_version(version: str, channel: str = "regular") -> None:
    keda = Module.objects.get(name="keda")
    keda.channels = {**keda.channels, channel: version}
    module_services.module_save(module=keda)


def states(rollout: Rollout) -> dict[str, str]:
    return dict(RolloutTarget.objects.filter(rollout=rollout).values_list("kyma__name", "state"))


def latest() -> Rollout:
    return Rollout.objects.order_by("-pk").first()
