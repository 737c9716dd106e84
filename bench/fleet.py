"""A periodic sweep of a fleet of emulated runtimes by real Celery workers, near and far.

For each fleet size (default 1,000 then 5,000 emulated runtimes, all in this process) it registers
the Kymas, lets the workers do the first reconcile of every runtime with ``--rtt`` seconds added to
every runtime API answer (a runtime in another region), then times full periodic sweeps in the
steady state (every reconcile a no-op) at that round trip and at 0, and reports per sweep: no-op
reconciles per second, runtime API calls per no-op reconcile (reads and writes, counted by the
emulators), SQL statements per no-op reconcile (measured in this process: a batch of
``RECONCILE_BATCH_SIZE`` Kymas as beat's sweep queues them, statements / Kymas), worker CPU per
no-op reconcile (the worker processes' user + system CPU seconds over the sweep / its Kymas), and the
resident memory of all worker processes together. Then one runtime starts answering after
``--slow`` seconds: the sweep of the others must not slow down by more than 10 %. With
``--compare-pools`` the smallest fleet is swept again by other pools (e.g. today's prefork), the
evidence for the default pool. Each sweep makes every Kyma due and runs beat's own sweep task
(``controlplane.reconcile_due``, here in this process): its reconciles are periodic ones, queued
exactly as in production. Their runtimes' watchers count as alive (heard at registration,
``WATCHER_SILENT_AFTER`` a day), so a no-op reads the watcher's Secret, Deployment and webhooks
(3 reads), not the runtime's Kyma and module CRs, which the watcher's events cover. (Before
this benchmark queued through beat's task, it asked for full reconciles, which also read those
two: 5.00 reads per no-op.) The SQL figure counts one query for a no-op reconcile's queue mark
when marks live in the database (no Redis). The last lines are machine-readable::

    fleet: size=N rtt_ms=R noop_per_s=X reads_per_noop=A writes_per_noop=B sql_per_noop=S \
           cpu_ms_per_noop=C workers_rss_mib=M      (one line, wrapped here)
    fleet: rtt_ratio=Y        (no-op rate at the largest round trip / at 0, largest size)

Goals: at 10,000 runtimes and 50 ms, a no-op sweep in <= 300 s (120 s), rtt_ratio >= 0.7, the
first reconcile of all in <= 10 min, <= 3 reads, 0 writes and <= 10 SQL queries per no-op
reconcile at every size, all workers together < 1 GiB. Issue 36: cpu_ms_per_noop <= 6, sql_per_noop
<= 4, a 10,000-runtime sweep at 50 ms in <= 60 s, the first reconcile of 10,000 in <= 300 s.

    python bench/fleet.py [--sizes 1000,5000] [--rtt 0.05] [--workers 2] [--pool threads]
                          [--concurrency 16] [--slow 10] [--compare-pools prefork:4] [--smoke]

Use BENCH_DATABASE_URL (PostgreSQL) and BENCH_BROKER_URL (Redis) for production-like numbers.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import profiling
from common import (
    KEDA_IN_KYMA,
    clear_fleet,
    cpu_by_role,
    database_label,
    keda_module,
    klm_watcher,
    parse_args,
    register_kymas,
    setup_django,
    spawn,
    start_workers,
    stop_begin,
    stop_processes,
)

if os.environ.get("BENCH_BROKER_URL"):
    os.environ["CELERY_BROKER_URL"] = os.environ["BENCH_BROKER_URL"]
os.environ.setdefault("RUNTIME_CLIENT_CACHE", "10000")
# Beat's sweep queues every due Kyma of the fleet in one run (production queues 5,000 per scan).
os.environ.setdefault("RECONCILE_SWEEP_LIMIT", "1000000")
# The emulated runtimes run no watcher processes (their pods just look ready): the Kymas are
# registered as heard from their watcher, and the window is a day, so every watcher counts as
# alive for the whole run (as with heartbeats) and a periodic no-op trusts its events
# (docs/contributors/reconcile.md).
os.environ.setdefault("WATCHER_SILENT_AFTER", "86400")
setup_django("fleet")

import redis
from django.conf import settings
from django.db import connection
from django.db.models import Avg, Count
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from fleet import queue
from fleet.models import Kyma, Module, ModuleConfig, ReconcileRecord, ReconcileState
from fleet.queue.marks import flags
from fleet.tasks import reconcile_due
from pki import services as pki
from reconciler.run import kyma_reconcile_batch_run, kyma_reconcile_run
from runtime_emulator import EmulatorHost, crd_manifest

KEDA_CRD = crd_manifest("operator.kyma-project.io", "Keda", versions=("v1alpha1",))


def reset() -> None:
    clear_fleet()
    Module.objects.all().delete()
    klm_watcher(
        gateway={"selector": {"matchLabels": {"operator.kyma-project.io/watcher-gateway": "default"}}}
    )
    keda_module()
    pki.ca_bootstrap()


def register(host: EmulatorHost, size: int) -> list[int]:
    runtimes = host.create_many(size, prefix=f"fleet{size}", crds=[KEDA_CRD])
    names = [f"c-{size}-{n:05d}" for n in range(size)]
    kymas = register_kymas(runtimes, names, modules=[KEDA_IN_KYMA], heard=True)
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


def sweep(
    ids: list[int], since_id: int, *, wait_for: list[int] | None = None, timeout: float = 3600
) -> float:
    """Make every Kyma due and run beat's sweep (the task beat sends, in this process), then wait
    until all of ``wait_for`` (default: all of them) have run."""
    started = time.perf_counter()
    ReconcileState.objects.update(next_reconcile_at=timezone.now())
    queued = reconcile_due()
    if queued != len(ids):
        raise RuntimeError(f"beat's sweep queued {queued} of {len(ids)} Kymas")
    expected = wait_for if wait_for is not None else ids
    # Only the few Kymas not waited for are named: a filter naming 10,000 ids, compiled every
    # half second, took a third of this process's GIL from the emulated runtimes' event loop.
    others = set(ids) - set(expected)
    records = ReconcileRecord.objects.filter(pk__gt=since_id).exclude(kyma_id__in=others)
    # (below a thousand Kymas, e.g. the smoke's, the look costs next to nothing: more often)
    step = 0.5 if len(ids) >= 1000 else 0.05
    while time.perf_counter() - started < timeout:
        done = records.values("kyma_id").distinct().count()
        if done >= len(expected):
            return time.perf_counter() - started
        time.sleep(step)
    raise TimeoutError("the sweep did not finish")


def last_record_id() -> int:
    return ReconcileRecord.objects.order_by("-pk").values_list("pk", flat=True).first() or 0


def periodic_mark(kyma_id: int) -> None:
    """The mark beat's sweep leaves when it queues a Kyma: its task's reconcile is periodic."""
    now = timezone.now()
    flags().claim([kyma_id], now, now, full=False)


def queries_per_noop(kyma_ids: list[int]) -> tuple[float, int]:
    """SQL per no-op reconcile as a worker runs the task beat's sweep queued: a batch of
    ``RECONCILE_BATCH_SIZE`` Kymas (its statements / its Kymas), or one Kyma when batches are off."""
    batch = kyma_ids[: max(1, settings.RECONCILE_BATCH_SIZE)]

    def run() -> None:
        for kyma_id in batch:
            periodic_mark(kyma_id)
        if len(batch) > 1:
            kyma_reconcile_batch_run(batch, reason=queue.PERIODIC_REASON)
        else:
            kyma_reconcile_run(batch[0], reason=queue.PERIODIC_REASON)

    run()
    with CaptureQueriesContext(connection) as captured:
        run()
    if os.environ.get("BENCH_SHOW_SQL"):
        for number, query in enumerate(captured.captured_queries, 1):
            print(f"  SQL {number}: {query['sql'][:300]}")
    writes = ReconcileRecord.objects.filter(kyma_id__in=batch).order_by("-pk")[: len(batch)]
    return len(captured) / len(batch), sum(record.runtime_writes for record in writes)


def profile_start(procs: list, directory: str, name: str) -> list:
    """With ``--profile DIR``: py-spy (if installed) samples the thread holding each worker
    process's GIL (the Python code using the CPU, not threads waiting on a socket) over the sweep,
    into ``DIR/<size>-<rtt>-<n>.txt`` (collapsed stacks, for flame graphs and for
    :mod:`profiling`)"""
    if not directory:
        return []
    Path(directory).mkdir(parents=True, exist_ok=True)
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    return [
        spawn(
            [
                spy,
                "record",
                "--pid",
                str(proc.pid),
                "--rate",
                "200",
                "--gil",
                "--format",
                "raw",
                "--nonblocking",
                "--output",
                str(Path(directory) / f"{name}-{number}.txt"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for number, proc in enumerate(procs)
    ]


def redis_commands() -> int:
    """Commands the broker's Redis server has run so far (its INFO stats; -1 without Redis)."""
    url = os.environ.get("CELERY_BROKER_URL", "")
    if not url.startswith("redis"):
        return -1
    return int(redis.Redis.from_url(url).info("stats")["total_commands_processed"])


def profile_stop(profilers: list) -> None:
    """py-spy writes its samples when interrupted (SIGINT), then exits."""
    for proc in profilers:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGINT)
    for proc in profilers:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(30)
    stop_processes(profilers)


def noop_sweep(
    host: EmulatorHost, runtimes: list, ids: list[int], procs: list, rtt: float, profile: str = ""
) -> dict:
    """One steady-state sweep at round trip ``rtt``: its rate, calls per reconcile and memory."""
    host.set_latency(rtt, runtimes)
    for runtime in runtimes:
        runtime.counts.reset()
    roots = {"workers": [proc.pid for proc in procs]}
    # (the database and Redis servers of this machine: other users' work counts too)
    servers = {"postgres": "database", "redis-server": "redis"}
    profilers = profile_start(procs, profile, f"{len(ids)}-{rtt * 1000:.0f}ms")
    before = cpu_by_role(roots, servers)
    redis_before = redis_commands()
    try:
        seconds = sweep(ids, last_record_id())
    finally:
        after = cpu_by_role(roots, servers)
        cpu = after["workers"] - before["workers"]
        profile_stop(profilers)
    redis_ops = redis_commands() - redis_before
    cpu_ms = cpu * 1000 / len(ids)
    return {
        "profile": profiling.report(
            sorted(Path(profile).glob(f"{len(ids)}-{rtt * 1000:.0f}ms-*.txt")), cpu_ms
        )
        if profile
        else [],
        "rtt": rtt,
        "noop": seconds,
        "rate": len(ids) / seconds,
        "cpu_ms": cpu_ms,
        "db_cpu_ms": (after["database"] - before["database"]) * 1000 / len(ids),
        "redis_cpu_ms": (after["redis"] - before["redis"]) * 1000 / len(ids),
        "redis_ops": redis_ops / len(ids) if redis_ops >= 0 else float("nan"),
        "load": os.getloadavg()[0],
        "reads": sum(rt.counts.reads for rt in runtimes) / len(ids),
        "writes": sum(rt.counts.writes for rt in runtimes) / len(ids),
        "memory": sum(rss_mib(proc.pid) for proc in procs),
    }


def slow_sweep(host: EmulatorHost, runtimes: list, ids: list[int], rtt: float, slow: float) -> float:
    """Seconds to sweep every runtime but the first, which answers after ``slow`` seconds."""
    host.set_latency(rtt, runtimes)
    host.set_latency(slow, runtimes[:1])
    try:
        return sweep(ids, last_record_id(), wait_for=ids[1:])
    finally:
        host.set_latency(rtt, runtimes[:1])


def measure(host: EmulatorHost, size: int, args: argparse.Namespace, compare: list[tuple[str, int]]) -> dict:
    reset()
    ids = register(host, size)
    runtimes = [rt for rt in host if rt.name.startswith(f"fleet{size}-")]
    rtts = sorted({args.rtt, 0.0}, reverse=True)
    result: dict = {"size": size, "rows": [], "pools": []}
    procs = start_workers(args.workers, pool=args.pool, concurrency=args.concurrency)
    try:
        host.set_latency(rtts[0], runtimes)
        since = last_record_id()
        roots, servers = {"workers": [proc.pid for proc in procs]}, {"postgres": "database"}
        before, own_before = cpu_by_role(roots, servers), own_cpu()
        result["first"] = sweep(ids, since)
        after, own_after = cpu_by_role(roots, servers), own_cpu()
        result["first_cpu"] = {
            role: (after[role] - before[role]) * 1000 / size for role in ("workers", "database")
        }
        result["first_cpu"]["emulator"] = (own_after - own_before) * 1000 / size
        result["first_ms"] = ReconcileRecord.objects.filter(pk__gt=since).aggregate(ms=Avg("duration_ms"))[
            "ms"
        ]
        if args.first_only:
            raise FirstOnly
        ModuleConfig.objects.update(status={"state": "Ready"})  # the module managers report in
        result["settle"] = sweep(ids, last_record_id())  # status becomes Ready everywhere
        for rtt in rtts:
            result["rows"].append(noop_sweep(host, runtimes, ids, procs, rtt, args.profile))
        if args.slow:
            result["slow"] = slow_sweep(host, runtimes, ids[:], rtts[0], args.slow)
            result["slow_base"] = result["rows"][0]["noop"] * (size - 1) / size
        result["states"] = dict(Kyma.objects.values_list("state").annotate(n=Count("id")).order_by())
    except FirstOnly:
        compare = []
    finally:
        host.set_latency(0, runtimes)
        stop_begin(procs)  # they stop while the next pool's workers start (waited for below)
    for pool, concurrency in compare:
        started = start_workers(args.workers, pool=pool, concurrency=concurrency, name=pool)
        stop_processes(procs)
        procs = started
        try:
            row = noop_sweep(host, runtimes, ids, procs, rtts[0])
        finally:
            host.set_latency(0, runtimes)
            stop_begin(procs)
        result["pools"].append({"pool": pool, "concurrency": concurrency, **row})
    stop_processes(procs)
    if not args.first_only:
        result["queries"], result["noop_writes"] = queries_per_noop(ids[len(ids) // 2 :])
    for runtime in runtimes:
        host.remove(runtime)
    return result


def own_cpu() -> float:
    """CPU seconds this process used so far: the emulated runtimes' servers and the sweep's wait."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class FirstOnly(Exception):
    """--first-only: the sweeps are skipped."""


def open_files_at_most() -> None:
    """Thousands of emulated runtimes each hold a listening socket: use the hard limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="1000,5000")
    parser.add_argument("--rtt", type=float, default=0.05, help="seconds added to every runtime answer")
    parser.add_argument("--workers", type=int, default=2, help="worker processes")
    parser.add_argument("--pool", default="threads", help="Celery pool of the workers")
    parser.add_argument("--concurrency", type=int, default=16, help="pool slots per worker process")
    parser.add_argument(
        "--slow", type=float, default=10.0, help="answer delay of the one slow runtime (0: skip)"
    )
    parser.add_argument(
        "--compare-pools",
        default="prefork:4",
        help="pool:concurrency list swept again at the smallest size and the round trip ('' skips)",
    )
    parser.add_argument(
        "--profile", default="", help="directory: py-spy samples the workers over each no-op sweep"
    )
    parser.add_argument(
        "--first-only", action="store_true", help="stop after the first reconciles (no sweeps, no summary)"
    )
    args = parse_args(
        parser,
        smoke={
            "sizes": "8",
            "rtt": 0.0,
            "workers": 1,
            "concurrency": 4,
            "slow": 0.0,
            "compare_pools": "prefork:1",
        },
    )
    compare = [(p.split(":")[0], int(p.split(":")[1])) for p in args.compare_pools.split(",") if p]
    open_files_at_most()
    print(
        f"database: {database_label()}; broker: {os.environ.get('CELERY_BROKER_URL', 'filesystem')}; "
        f"{args.workers} worker processes, pool {args.pool} x {args.concurrency}; {os.cpu_count()} CPUs; "
        f"round trip {args.rtt * 1000:.0f} ms"
    )
    started = time.perf_counter()
    results = []
    # Idle connections close after 20 s: 10,000 runtimes' listening sockets and the connections a
    # sweep keeps open must fit the descriptor limit (20,000 here: with 30 s, the sweep at 0 ms,
    # 320 a second, went past it and connections were refused, "Too many open files"). A sweep
    # reaches each runtime once, so none of its connections is idle long enough to be reused anyway.
    with EmulatorHost(keepalive_timeout=20) as host:
        for index, size in enumerate(int(s) for s in args.sizes.split(",")):
            result = measure(host, size, args, compare if index == 0 else [])
            results.append(result)
            print(f"\n--- {size:,} runtimes   (states after the sweeps: {result.get('states', '-')})")
            print(
                f"first reconcile of every runtime at {args.rtt * 1000:.0f} ms: {result['first']:7.1f} s "
                f"= {size / result['first']:.1f}/s, {result['first_ms'] / 1000:.2f} s each on average  "
                "goal: <= 600 s at 10,000"
            )
            cpu = result["first_cpu"]
            print(
                f"  CPU per first reconcile: workers {cpu['workers']:.1f} ms, PostgreSQL "
                f"{cpu['database']:.1f} ms, the emulated runtimes (this process) {cpu['emulator']:.1f} ms"
            )
            for row in result["rows"]:
                print(
                    f"no-op sweep at {row['rtt'] * 1000:3.0f} ms: {row['noop']:7.1f} s = {row['rate']:6.1f} "
                    f"reconciles/s; {row['reads']:.2f} reads, {row['writes']:.2f} writes per reconcile; "
                    f"{row['cpu_ms']:.1f} ms of worker CPU per reconcile (the whole servers': "
                    f"PostgreSQL {row['db_cpu_ms']:.1f} ms, Redis {row['redis_cpu_ms']:.2f} ms and "
                    f"{row['redis_ops']:.1f} commands); "
                    f"workers {row['memory']:.0f} MiB (load average {row['load']:.1f})"
                )
                for line in row["profile"]:
                    print(f"  {line}")
            if "slow" in result:
                base_rate = (size - 1) / result["slow_base"]
                rate = (size - 1) / result["slow"]
                drop = (1 - rate / base_rate) * 100
                change = f"{drop:.1f} % slower" if drop > 0 else f"not slower ({-drop:.1f} % faster)"
                print(
                    f"one runtime answering after {args.slow:.0f} s: the other {size - 1:,} swept in "
                    f"{result['slow']:.1f} s = {rate:.1f}/s vs {base_rate:.1f}/s: {change} "
                    "(goal: at most 10 % slower)"
                )
            for row in result["pools"]:
                print(
                    f"pool {row['pool']} x {row['concurrency']} per worker at {row['rtt'] * 1000:.0f} ms: "
                    f"{row['rate']:.1f} no-op reconciles/s (vs {result['rows'][0]['rate']:.1f}/s with "
                    f"{args.pool} x {args.concurrency}); workers {row['memory']:.0f} MiB"
                )
            if args.first_only:
                continue
            print(
                f"SQL queries per no-op reconcile: {result['queries']:.2f} "
                f"(runtime writes: {result['noop_writes']})"
            )
    print(f"\nbenchmark took {time.perf_counter() - started:.0f} s\n")
    if args.first_only:
        return
    for result in results:
        for row in result["rows"]:
            print(
                f"fleet: size={result['size']} rtt_ms={row['rtt'] * 1000:.0f} noop_per_s={row['rate']:.1f} "
                f"reads_per_noop={row['reads']:.2f} writes_per_noop={row['writes']:.2f} "
                f"sql_per_noop={result['queries']:.2f} cpu_ms_per_noop={row['cpu_ms']:.1f} "
                f"workers_rss_mib={row['memory']:.0f}"
            )
    largest = results[-1]["rows"]
    print(f"fleet: rtt_ratio={largest[0]['rate'] / largest[-1]['rate']:.2f}")


if __name__ == "__main__":
    main()
