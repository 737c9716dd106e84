"""A module version rolled out in waves over a fleet of emulated runtimes, by real Celery workers.

It registers ``--runtimes`` emulated runtimes (default 1,000, all in this process) with keda
1.0.0 in channel regular, lets the workers reconcile them and a module manager (a thread here,
watching ModuleConfigs as a manager would and reporting with the same service as the API) report
keda Ready everywhere. Then two runs, each a new version of keda in regular, which goes out as an
automatic rollout with the default policy (a canary, then 5 %, 25 %, 100 %; at most 2 % of a
wave's runtimes may fail):

1. 1.1.0, which works everywhere: the rollout must complete;
2. 1.2.0, which fails in 1 runtime in 20 (its manager reports Error there): the rollout must halt
   (halted=1) having changed no more runtimes than the canary and the first wave.

This process stands in for beat: it publishes the task ``controlplane.rollouts_advance`` every
``ROLLOUT_ADVANCE_INTERVAL`` seconds and beat's sweep ``controlplane.reconcile_due`` every
``RECONCILE_SWEEP_INTERVAL``, which the workers run. The runtimes' watchers count as alive
(the emulated runtimes run no watcher processes). Per run it prints when each wave started and
passed, and at the end exactly one line per run::

    rollout: runtimes=N waves=W duration_s=D halted=H changed_before_halt=C

``duration_s`` runs from the catalog change to the rollout's end (completed, or halted);
``changed_before_halt`` counts the runtimes its waves reached (all of them when it completed).
Goal: the failing run halts (H = 1) with C <= the canary plus the first wave.

    python bench/rollout.py [--runtimes 1000] [--workers 2] [--concurrency 16] [--smoke]

``--smoke``: 30 runtimes, one worker, a run takes seconds (CI runs it); nothing is left running.
Use BENCH_DATABASE_URL (PostgreSQL) and BENCH_BROKER_URL (Redis) for production-like numbers.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
import uuid

from common import (
    KEDA_IN_KYMA,
    clear_fleet,
    database_label,
    keda_module,
    klm_watcher,
    register_kymas,
    setup_django,
    start_workers,
    stop_processes,
)

if os.environ.get("BENCH_BROKER_URL"):
    os.environ["CELERY_BROKER_URL"] = os.environ["BENCH_BROKER_URL"]
os.environ.setdefault("RUNTIME_CLIENT_CACHE", "10000")
os.environ.setdefault("WATCHER_SILENT_AFTER", "86400")  # the runtimes' watchers count as heard
# (--smoke: beat's tasks, which this process sends, come more often and a runtime's reconciles
# are spaced 0.2 s, not 1 s: each wave's runtimes, reconciled moments before, no longer count as
# busy runtimes that keep changing, whose tasks wait for a few slots)
os.environ.setdefault("ROLLOUT_ADVANCE_INTERVAL", "0.25" if "--smoke" in sys.argv else "1")
if "--smoke" in sys.argv:
    os.environ.setdefault("RECONCILE_MIN_SPACING", "0.2")
setup_django("rollout")

from celery import current_app
from django.conf import settings
from django.db import close_old_connections
from django.utils import timezone

from fleet import queue
from fleet.models import Kyma, Module, ModuleConfig, Rollout, RolloutEvent, RolloutState, RolloutTarget
from fleet.models.rollout import RELEASED_STATES
from fleet.services import modules as module_services
from pki import services as pki
from runtime_emulator import EmulatorHost, crd_manifest

KEDA_CRD = crd_manifest("operator.kyma-project.io", "Keda", versions=("v1alpha1",))
FAILS_ONE_IN = 20
UIDS = uuid.UUID("5b1e0c2a-0000-4d1f-9a6e-000000000000")  # the runtimes' uids are derived from their names


def reset() -> None:
    Rollout.objects.all().delete()
    clear_fleet()
    Module.objects.all().delete()
    klm_watcher(
        gateway={"selector": {"matchLabels": {"operator.kyma-project.io/watcher-gateway": "default"}}}
    )
    keda_module()
    pki.ca_bootstrap()


def register(host: EmulatorHost, size: int) -> list[int]:
    runtimes = host.create_many(size, prefix="rollout", crds=[KEDA_CRD])
    names = [f"r-{n:05d}" for n in range(size)]
    kymas = register_kymas(
        runtimes, names, modules=[KEDA_IN_KYMA], uid=lambda name: uuid.uuid5(UIDS, name), heard=True
    )
    return [k.pk for k in kymas]


def failing(runtime_id: str) -> bool:
    """The runtimes where the failing version fails: 1 in 20, by their number."""
    return int(runtime_id.rsplit("-", 1)[1]) % FAILS_ONE_IN == FAILS_ONE_IN // 2


class Manager(threading.Thread):
    """keda's module manager: deploys what each ModuleConfig says and reports on it (Error for
    ``bad_version`` in the failing runtimes), following the configs by revision as the SDK does."""

    def __init__(self) -> None:
        super().__init__(name="manager", daemon=True)
        self.bad_version = ""
        self.stopping = threading.Event()
        self.reports = 0

    def run(self) -> None:
        seen = 0
        while not self.stopping.is_set():
            close_old_connections()
            configs = list(
                ModuleConfig.objects.filter(revision__gt=seen)
                .select_related("kyma")
                .order_by("revision")[:500]
            )
            for config in configs:
                seen = max(seen, config.revision)
                broken = config.version == self.bad_version and failing(config.kyma.runtime_id)
                wanted = {
                    "state": "Error" if broken else "Ready",
                    "message": "the keda operator crashes at start" if broken else "",
                }
                if {k: config.status.get(k, "") for k in wanted} != wanted:
                    module_services.moduleconfig_set_status(config=config, status=wanted)
                    self.reports += 1
            if not configs:
                time.sleep(0.2)


def wait_for(check, what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        close_old_connections()
        if check():
            return
        time.sleep(0.1)
    raise TimeoutError(f"{what} did not happen within {timeout:.0f} s")


def settle(ids: list[int], timeout: float) -> None:
    """Reconcile every runtime until each is Ready with keda reported Ready."""
    for start in range(0, len(ids), 500):
        queue.request(ids[start : start + 500], reason="benchmark")

    def all_ready() -> bool:
        return Kyma.objects.exclude(state="Ready").count() == 0

    wait_for(all_ready, "every runtime Ready", timeout)


def roll_out(version: str, manager: Manager, timeout: float, *, bad: bool) -> dict:
    manager.bad_version = version if bad else ""
    keda = Module.objects.get(name="keda")
    keda.channels = {"regular": version}
    started = time.perf_counter()
    module_services.module_save(module=keda)
    rollout = Rollout.objects.get(subject="keda/regular", state=RolloutState.PROGRESSING)
    interval = settings.ROLLOUT_ADVANCE_INTERVAL
    deadline = time.monotonic() + timeout
    swept = time.monotonic()
    while True:
        current_app.send_task("controlplane.rollouts_advance")  # as beat does
        if time.monotonic() - swept >= settings.RECONCILE_SWEEP_INTERVAL:
            # and its sweep: a Kyma whose reconcile failed (a runtime's connection reset under
            # load) is due again after its backoff; without it, it waited for the gate's time limit
            current_app.send_task("controlplane.reconcile_due")
            swept = time.monotonic()
        time.sleep(interval)
        close_old_connections()
        rollout.refresh_from_db()
        if rollout.state in (RolloutState.COMPLETED, RolloutState.HALTED):
            break
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"rollout {rollout.name} still {rollout.state} after {timeout:.0f} s: {rollout.message}"
            )
    duration = time.perf_counter() - started
    reached = RolloutTarget.objects.filter(rollout=rollout, state__in=RELEASED_STATES).count()
    sizes = [
        RolloutTarget.objects.filter(rollout=rollout, wave=index).count()
        for index in range(len(rollout.waves))
    ]
    return {
        "rollout": rollout,
        "duration": duration,
        "halted": int(rollout.state == RolloutState.HALTED),
        "changed": reached,
        "sizes": sizes,
        "events": list(RolloutEvent.objects.filter(rollout=rollout).order_by("at", "pk")),
    }


def report(result: dict, label: str) -> None:
    rollout = result["rollout"]
    print(f"\n--- {label}: {rollout.name}, {rollout.runtimes} runtimes, waves {result['sizes']}")
    begin = result["events"][0].at if result["events"] else timezone.now()
    for event in result["events"]:
        if event.kind in ("wave-started", "gate-passed", "halted", "completed"):
            print(f"  +{(event.at - begin).total_seconds():6.1f} s  {event.kind:<12} {event.text[:150]}")
    print(f"  {rollout.state} after {result['duration']:.1f} s; {result['changed']} runtime(s) reached")


def line(result: dict) -> str:
    rollout, seconds = result["rollout"], result["duration"]
    return (
        f"rollout: runtimes={rollout.runtimes} waves={len(rollout.waves)} duration_s={seconds:.1f} "
        f"halted={result['halted']} changed_before_halt={result['changed']}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runtimes", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=2, help="worker processes")
    parser.add_argument("--concurrency", type=int, default=16, help="threads per worker process")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds a step may take at most")
    parser.add_argument("--smoke", action="store_true", help="30 runtimes, one worker: seconds, for CI")
    args = parser.parse_args()
    if args.smoke:
        args.runtimes, args.workers, args.concurrency, args.timeout = 30, 1, 8, 300
    print(
        f"database: {database_label()}; broker: {os.environ.get('CELERY_BROKER_URL', 'filesystem')}; "
        f"{args.workers} worker processes x {args.concurrency}; {os.cpu_count()} CPUs; "
        f"{args.runtimes} runtimes"
    )
    reset()
    manager = Manager()
    results = []
    with EmulatorHost(keepalive_timeout=30) as host:
        ids = register(host, args.runtimes)
        procs = start_workers(args.workers, pool="threads", concurrency=args.concurrency)
        manager.start()
        try:
            started = time.perf_counter()
            settle(ids, args.timeout)
            took = time.perf_counter() - started
            print(f"first reconcile of {len(ids)} runtimes, keda Ready everywhere: {took:.1f} s")
            results.append(roll_out("1.1.0", manager, args.timeout, bad=False))
            report(results[-1], "run 1, a version that works")
            results.append(roll_out("1.2.0", manager, args.timeout, bad=True))
            report(results[-1], f"run 2, a version that fails in 1 runtime in {FAILS_ONE_IN}")
        finally:
            manager.stopping.set()
            manager.join(10)
            stop_processes(procs)
    failing_run = results[-1]
    bound = failing_run["sizes"][0] + failing_run["sizes"][1]
    met = failing_run["halted"] == 1 and failing_run["changed"] <= bound
    goal = "met" if met else "NOT met"
    if args.smoke:
        goal += " (a smoke run is too small to judge it: its first wave holds one runtime)"
    print(f"\ngoal: the failing run halts having reached at most the canary and the first wave ({bound}):")
    print(f"  {goal}\n")
    for result in results:
        print(line(result))


if __name__ == "__main__":
    main()
