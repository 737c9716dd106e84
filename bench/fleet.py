"""A periodic sweep of a fleet of emulated runtimes by real Celery workers.

For each fleet size (default 1,000 then 5,000 emulated runtimes, all in this process) it registers
the Kymas, lets the workers do the first reconcile of every runtime, then times a full periodic
sweep in the steady state (every reconcile a no-op) and reports: sweep time and reconciles per
second, runtime API calls per no-op reconcile (reads and writes, counted by the emulators), SQL
queries per no-op reconcile (measured in this process for one Kyma), and memory per worker
process. The smaller fleet is the baseline for the ratios.
Goal: a no-op reconcile makes 0 runtime writes and a constant number of queries; a sweep of 5,000
runtimes finishes within the 5-minute Ready interval.

    python bench/fleet.py [--sizes 1000,5000] [--workers 2]

Use BENCH_DATABASE_URL (PostgreSQL) and BENCH_BROKER_URL (Redis) for production-like numbers.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import time
import uuid
from pathlib import Path

from common import database_label, klm_watcher, setup_django, start_workers, stop_processes

if os.environ.get("BENCH_BROKER_URL"):
    os.environ["CELERY_BROKER_URL"] = os.environ["BENCH_BROKER_URL"]
os.environ.setdefault("RUNTIME_CLIENT_CACHE", "3000")
# The emulated runtimes run no watcher processes (their pods just look ready): without this the
# Kymas would turn Warning for silent watchers two minutes in, and be polled every 30 s.
os.environ.setdefault("WATCHER_SILENT_AFTER", "0")
setup_django("fleet")

from django.db import connection
from django.db.models import Count
from django.test.utils import CaptureQueriesContext

from fleet import queue
from fleet.models import Kyma, Module, ModuleConfig, ReconcileRecord
from fleet.reconciler.run import kyma_reconcile_run
from kernel.documents.yamlio import dump_yaml
from kernel.sealing import Sealed
from pki import services as pki
from pki.models import Certificate
from runtime_emulator import EmulatorHost, crd_manifest
from watchers.models import Watcher

KEDA_CRD = crd_manifest("operator.kyma-project.io", "Keda", versions=("v1alpha1",))


def reset() -> None:
    Certificate.objects.filter(kyma__isnull=False).delete()
    Kyma.objects.all().delete()
    Watcher.objects.all().delete()
    Module.objects.all().delete()
    klm_watcher(
        gateway={"selector": {"matchLabels": {"operator.kyma-project.io/watcher-gateway": "default"}}}
    )
    Module.objects.create(
        name="keda",
        channels={"regular": "1.0.0"},
        cr_group="operator.kyma-project.io",
        cr_version="v1alpha1",
        cr_kind="Keda",
        cr_plural="kedas",
        default_cr={"spec": {"replicas": 1}},
    )
    pki.ca_bootstrap()


def register(host: EmulatorHost, size: int) -> list[int]:
    runtimes = host.create_many(size, prefix=f"fleet{size}", crds=[KEDA_CRD])
    rows = [
        Kyma(
            uid=uuid.uuid4(),
            namespace="kcp-system",
            name=f"c-{size}-{n:05d}",
            runtime_id=f"rt-{size}-{n:05d}",
            skr_domain=f"c-{n:05d}.kyma.example.com",
            modules=[{"name": "keda", "customResourcePolicy": "CreateAndDelete", "managed": True}],
            kubeconfig=Sealed.seal(dump_yaml([runtime.kubeconfig()])),
        )
        for n, runtime in enumerate(runtimes)
    ]
    Kyma.objects.bulk_create(rows, batch_size=1000)
    kymas = list(Kyma.objects.order_by("pk"))
    pki.certificates_issue_bulk(kymas=kymas)
    return [k.pk for k in kymas]


def rss_mib(pid: int) -> float:
    """Resident memory of a worker and its pool processes."""
    pids = [
        pid,
        *map(
            int,
            subprocess.run(
                ["pgrep", "-P", str(pid)], capture_output=True, text=True, check=False
            ).stdout.split(),
        ),
    ]
    total = 0
    for one in pids:
        for line in Path(f"/proc/{one}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1])
    return total / 1024


def sweep(ids: list[int], since_id: int, timeout: float = 900) -> float:
    """Queue a reconcile of every Kyma (as beat's sweep does) and wait until all have run."""
    started = time.perf_counter()
    for start in range(0, len(ids), 500):
        queue.request(ids[start : start + 500], reason="bench sweep")
    while time.perf_counter() - started < timeout:
        done = ReconcileRecord.objects.filter(pk__gt=since_id).values("kyma_id").distinct().count()
        if done >= len(ids):
            return time.perf_counter() - started
        time.sleep(0.5)
    raise TimeoutError("the sweep did not finish")


def last_record_id() -> int:
    return ReconcileRecord.objects.order_by("-pk").values_list("pk", flat=True).first() or 0


def queries_per_noop(kyma_id: int) -> tuple[int, int]:
    kyma_reconcile_run(kyma_id)
    with CaptureQueriesContext(connection) as captured:
        kyma_reconcile_run(kyma_id)
    record = ReconcileRecord.objects.filter(kyma_id=kyma_id).order_by("-pk").first()
    return len(captured), record.runtime_writes


def measure(host: EmulatorHost, size: int, workers: int) -> dict:
    reset()
    ids = register(host, size)
    procs = start_workers(workers)
    try:
        first = sweep(ids, last_record_id())
        ModuleConfig.objects.update(status={"state": "Ready"})  # the module managers report in
        settle = sweep(ids, last_record_id())  # status becomes Ready everywhere
        runtimes = [rt for rt in host if rt.name.startswith(f"fleet{size}")]
        for runtime in runtimes:
            runtime.counts.reset()
        mark = last_record_id()
        noop = sweep(ids, mark)
        reads = sum(rt.counts.reads for rt in runtimes)
        writes = sum(rt.counts.writes for rt in runtimes)
        states = dict(Kyma.objects.values_list("state").annotate(n=Count("id")).order_by())
        memory = [rss_mib(proc.pid) for proc in procs]
    finally:
        stop_processes(procs)
    queries, noop_writes = queries_per_noop(ids[len(ids) // 2])
    for runtime in [rt for rt in host if rt.name.startswith(f"fleet{size}")]:
        host.remove(runtime)
    return {
        "size": size,
        "first": first,
        "settle": settle,
        "noop": noop,
        "reads": reads / size,
        "writes": writes / size,
        "queries": queries,
        "noop_writes": noop_writes,
        "memory": memory,
        "states": states,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="1000,5000")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    print(
        f"database: {database_label()}; broker: {os.environ.get('CELERY_BROKER_URL', 'filesystem')}; "
        f"{args.workers} worker processes; {os.cpu_count()} CPUs"
    )
    results = []
    with EmulatorHost() as host:
        for size in (int(s) for s in args.sizes.split(",")):
            result = measure(host, size, args.workers)
            results.append(result)
            print(f"\n--- {size:,} runtimes   (states after the sweeps: {result['states']})")
            print(f"first reconcile of every runtime:      {result['first']:7.1f} s")
            rate = size / result["noop"]
            print(
                f"periodic sweep, all no-op:             {result['noop']:7.1f} s  = {rate:6.1f} reconciles/s "
                "goal: < 300 s"
            )
            print(
                f"runtime API calls per no-op reconcile: {result['reads']:.1f} reads, "
                f"{result['writes']:.2f} writes"
            )
            print(
                f"SQL queries per no-op reconcile:       {result['queries']}  "
                f"(runtime writes: {result['noop_writes']})"
            )
            print(
                "memory per worker:                     "
                + ", ".join(f"{m:.0f} MiB" for m in result["memory"])
            )
    base = results[0]
    for result in results[1:]:
        per_base = base["noop"] / base["size"]
        per_size = result["noop"] / result["size"]
        print(
            f"\n{result['size']:,} vs {base['size']:,}: sweep time per runtime x{per_size / per_base:.2f}, "
            f"queries per reconcile {base['queries']} -> {result['queries']} "
            f"({'constant' if base['queries'] == result['queries'] else 'NOT constant'}), memory per worker "
            f"x{max(result['memory']) / max(base['memory']):.2f}"
        )


if __name__ == "__main__":
    main()
