"""``manage.py demo``: simulated runtimes to try the control plane with (``make run`` starts it).

Each runtime is an emulated Kubernetes API server on a loopback port, registered as a Kyma with its
kubeconfig. The worker reconciles it like any runtime: it deploys the runtime watcher, which the
loopback kubelet runs as a real ``python -m watchers.runtime`` process, so a change inside a
runtime travels webhook → watcher → listener (mutual TLS) → broker → worker as in production.

While it runs, a simulated module manager reports Ready every module that has no manager of its own,
that is no live module credential: keda's manager is the SDK's example (``manage.py demo_manager``,
a role of ``make run``, with a keda credential), which answers the keda CR's spec with a Deployment
and a ConfigMap in that runtime (``runtime_edit demo-1 --module-spec keda replicas=3``); a module
whose team created a credential (the tutorial's serverless manager) is left to that team's manager,
whatever it reports. Once every demo runtime is Ready, keda's version in channel regular moves from
2.14.0 to 2.15.0 (``--rollout-after`` seconds later): the change goes out as a rollout, one runtime
per wave with a bake time between them, so its page (Fleet → Rollouts) shows the waves going by, and
the keda operator's image in each runtime follows its wave. A simulated user that edits one
runtime's Kyma every ``--edit-every`` seconds (switching its channel) is off by default: it would
race the edits a person makes (``runtime_edit`` would find its own change undone, or already made).
Edit a runtime yourself with ``manage.py runtime_edit demo-1 --channel fast``. The emulated
runtimes live in this process: after a restart they are new and empty, and the demo Kymas get new
kubeconfigs (which reconciles them into the new runtimes).
"""

from __future__ import annotations

import itertools
import random
import signal
import time
from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.db import close_old_connections
from django.db.models import Q
from django.utils import timezone

from fleet.models import Kyma, KymaState, Module, ModuleConfig, ModuleCredential, Rollout
from fleet.services import kymas as kyma_services
from fleet.services import modules as module_services
from kernel.documents.yamlio import dump_yaml
from kernel.errors import ApplicationError
from kernel.management.arguments import seconds
from pki import services as pki
from reconciler.runtime_edits import runtime_kyma_edit
from runtime_emulator import EmulatorHost, RuntimeEmulator, crd_manifest
from runtime_emulator.kubelet import ProcessKubelet
from watchers.models import Watcher
from watchers.services import watcher_apply

NAMESPACE = "kcp-system"
DEMO_LABEL = {"controlplane.kyma-project.io/demo": "true"}
MODULES = {
    "keda": ("Keda", {"spec": {"replicas": 1, "logLevel": "info"}}),
    "serverless": ("Serverless", {"spec": {"dockerRegistry": {"enableInternal": True}}}),
}
# keda's versions are keda's own (its manager runs ghcr.io/kedacore/keda:<version>).
CHANNELS = {
    "keda": {"regular": "2.14.0", "fast": "2.16.0"},
    "serverless": {"regular": "1.0.0", "fast": "1.1.0"},
}
# The demo's rollout: keda 2.14.0 -> 2.15.0 in regular, one runtime per wave, 20 s between waves.
ROLLOUT = ("keda", "regular", "2.14.0", "2.15.0")
KEDA_ROLLOUT_POLICY = {
    "waves": [{"name": "canary", "size": 1}, {"name": "next", "size": 1}, {"name": "rest", "size": "100%"}],
    "gate": {"timeoutSeconds": 300, "maxErrorRatio": 0, "bakeSeconds": 20},
}
# The module whose manager is the SDK's example (manage.py demo_manager).
SDK_EXAMPLE_MODULE = "keda"
LIFECYCLE_WATCHER = {
    "namespace": NAMESPACE,
    "name": "klm-watcher",
    "manager": "lifecycle-manager",
    "labels_to_watch": {"operator.kyma-project.io/watched-by": "kyma"},
    "resource_to_watch": {"group": "operator.kyma-project.io", "version": "*", "resource": "kymas"},
    "field": "spec",
    "service_info": {"name": "klm-events", "namespace": NAMESPACE, "port": 8082},
}


def ensure_catalog() -> None:
    """What the demo runtimes need: a CA, the lifecycle-manager Watcher and two modules."""
    pki.ca_bootstrap()
    if not Watcher.objects.filter(namespace=NAMESPACE, name=LIFECYCLE_WATCHER["name"]).exists():
        watcher_apply(**LIFECYCLE_WATCHER)
    for name, (kind, default_cr) in MODULES.items():
        if not Module.objects.filter(name=name).exists():
            module_services.module_apply(
                name=name,
                channels=CHANNELS[name],
                rollout_policy=KEDA_ROLLOUT_POLICY if name == "keda" else {},
                cr_group="operator.kyma-project.io",
                cr_version="v1alpha1",
                cr_kind=kind,
                cr_plural=f"{kind.lower()}s",
                default_cr=default_cr,
            )


def register(runtime: RuntimeEmulator, number: int) -> Kyma:
    """The demo Kyma of a runtime (created once, then only given the runtime's new kubeconfig)."""
    for kind, _ in MODULES.values():
        runtime.register_crd(crd_manifest("operator.kyma-project.io", kind, versions=("v1alpha1",)))
    name = f"demo-{number}"
    kyma = Kyma.objects.filter(namespace=NAMESPACE, name=name).first()
    if kyma is None:
        kyma, _ = kyma_services.kyma_apply(
            namespace=NAMESPACE,
            name=name,
            runtime_id=f"demo-runtime-{number}",
            skr_domain=f"demo-{number}.kyma.example.com",
            modules=[{"name": "keda"}],
            labels=DEMO_LABEL,
        )
    kyma_services.kyma_set_kubeconfig(kyma=kyma, kubeconfig=dump_yaml([runtime.kubeconfig()]))
    return kyma


def modules_with_a_manager() -> set[str]:
    """Modules a manager of their own answers: keda (the SDK's example, ``demo_manager``, even
    before it started), and every module with a live (unrevoked, unexpired) module credential,
    such as the one a reader of the tutorial created for serverless."""
    live = ModuleCredential.objects.filter(revoked_at__isnull=True).filter(
        Q(expires_at__isnull=True) | Q(expires_at__gt=timezone.now())
    )
    return {SDK_EXAMPLE_MODULE, *live.values_list("module__name", flat=True)}


def report_modules_ready(kymas: list[Kyma]) -> list[str]:
    """The simulated module managers: every module of a demo Kyma without a manager of its own
    (:func:`modules_with_a_manager`) reports Ready."""
    reported = []
    configs = ModuleConfig.objects.filter(kyma__in=kymas).exclude(module__name__in=modules_with_a_manager())
    for config in configs.select_related("kyma", "module"):
        if (config.status or {}).get("state") == "Ready":
            continue
        module_services.moduleconfig_set_status(config=config, status={"state": "Ready"})
        reported.append(f"{config.module.name} of {config.kyma.name}")
    return reported


def all_ready(kymas: list[Kyma]) -> bool:
    states = Kyma.objects.filter(pk__in=[k.pk for k in kymas]).values_list("state", flat=True)
    return len(states) == len(kymas) and all(state == KymaState.READY for state in states)


class Command(BaseCommand):
    help = "Run simulated runtimes (emulated API servers with the runtime watcher) until stopped."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--runtimes", type=int, default=3, help="how many runtimes (1-50)")
        parser.add_argument(
            "--rollout-after",
            type=seconds,
            default=30,
            help="seconds after every runtime is Ready before keda 2.15.0 goes out in waves (0: never)",
        )
        parser.add_argument(
            "--edit-every",
            type=seconds,
            default=0,
            help="seconds between edits by a simulated user (default 0: none, so it never races "
            "your own runtime_edit)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        count, every = options["runtimes"], options["edit_every"]
        if not 1 <= count <= 50:
            self.stderr.write("--runtimes must be between 1 and 50")
            raise SystemExit(2)
        signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
        ensure_catalog()
        kubelet = ProcessKubelet()
        host = EmulatorHost(kubelet=kubelet)
        host.start()
        try:
            kymas = [register(host.create(f"demo-{n}"), n) for n in range(1, count + 1)]
            self.stdout.write(
                f"{count} simulated runtimes: {', '.join(k.name for k in kymas)} "
                "(edit one: python manage.py runtime_edit demo-1 --channel fast, "
                "or --module-spec keda replicas=3)"
            )
            self.run(kymas, every, options["rollout_after"])
        except KeyboardInterrupt:
            pass
        finally:
            host.run(kubelet.aclose())
            host.stop()

    def run(self, kymas: list[Kyma], every: float, rollout_after: float) -> None:
        channels = itertools.cycle(["fast", "regular"])
        next_edit = time.monotonic() + every if every else float("inf")
        ready_since: float | None = None
        while True:
            close_old_connections()
            for what in report_modules_ready(kymas):
                self.stdout.write(f"module manager: {what} is Ready")
            if rollout_after and ready_since is None and all_ready(kymas):
                ready_since = time.monotonic()
            if ready_since is not None and time.monotonic() - ready_since >= rollout_after:
                ready_since, rollout_after = None, 0
                self.start_rollout()
            if time.monotonic() >= next_edit:
                next_edit = time.monotonic() + every
                self.user_edit(random.choice(kymas), next(channels))
            time.sleep(1)

    def start_rollout(self) -> None:
        """keda's new version in regular, once per demo state (a restarted demo does not repeat it)."""
        name, channel, old, new = ROLLOUT
        keda = Module.objects.filter(name=name).first()
        if (
            keda is None
            or keda.channels.get(channel) != old
            or Rollout.objects.filter(subject=f"{name}/{channel}").exists()
        ):
            return
        keda.channels = {**keda.channels, channel: new}
        try:
            module_services.module_save(module=keda)
        except ApplicationError as exc:
            self.stdout.write(f"demo rollout: not started ({exc.message})")
            return
        rollout = Rollout.objects.filter(subject=f"{name}/{channel}").order_by("-pk").first()
        where = f"rollout {rollout.name}" if rollout else "at once (one runtime)"
        self.stdout.write(
            f"demo: keda {old} -> {new} in channel {channel} goes out in waves: {where} (Fleet -> Rollouts)"
        )

    def user_edit(self, kyma: Kyma, channel: str) -> None:
        try:
            changed = runtime_kyma_edit(kyma=kyma, channel=channel)
        except ApplicationError as exc:
            self.stdout.write(f"simulated user: no edit of {kyma.name} ({exc.message})")
            return
        if changed:
            self.stdout.write(f"simulated user: switched {kyma.name} to channel {channel} inside its runtime")
