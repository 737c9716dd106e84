"""The module loop, end to end: a module CR edited in a runtime → its manifest changed there.

Every part is real and separate: emulated runtimes whose API server calls the module-CR webhook
(our runtime watcher process, run by the loopback kubelet), the listener (gunicorn, mutual TLS),
Celery workers reconciling the Kyma (ModuleConfig updated), the web role streaming the change to
the SDK's example keda manager (its own process, ``sdk/examples/keda_manager.py``), which
publishes a SyncResource, which a worker applies into the runtime. No Watcher exists. Measured
per edit: from just before the edit to the moment the runtime's ``keda-operator`` Deployment has
the new ``replicas``.

  (a) at rest: one edit at a time on --runtimes runtimes;
  (b) the same while --load-rate edits/s hit --load-runtimes other runtimes' keda CRs, once the
      load runs (its first --storm-samples edits are reported apart, as (b0): until the load's
      runtimes count as busy, their first changes are served like any quiet runtime's);
  (c) --watches open watches of the web role all receiving one change (per watch: change
      committed → line received), over --rounds changes.

The chain holds two reconciles of the same Kyma (the CR's spec into the ModuleConfig, then the
manager's SyncResource into the runtime); ``RECONCILE_MIN_SPACING`` (1 s by default) spaces
runtime events, not the second one (a SyncResource is a control-plane change), but the load's
runtimes are spaced: ``--min-spacing`` sets it for the workers (printed).
Goals: (a) p99 ≤ 1 s, (b) p99 ≤ 2 s, (c) p99 ≤ 200 ms. The last line is
``module_chain: p50_ms=X p99_ms=Y loaded_p99_ms=Z watch_p99_ms=W``.

    BENCH_DATABASE_URL=postgres://postgres@127.0.0.1:5432/bench \\
    BENCH_BROKER_URL=redis://127.0.0.1:6379/15 python bench/module_chain.py
    python bench/module_chain.py --runtimes 2 --load-runtimes 4 --load-rate 5 --samples 10 --watches 10
    python bench/module_chain.py --smoke
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import itertools
import json
import os
import random
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from common import (
    ROOT,
    clear_fleet,
    converge,
    cpu_by_role,
    database_label,
    free_port,
    keda_module,
    parse_args,
    percentile,
    register_kymas,
    scratch_dir,
    setup_django,
    spawn,
    start_listener,
    start_workers,
    stop_processes,
    wait_port,
)

if os.environ.get("BENCH_BROKER_URL"):
    os.environ["CELERY_BROKER_URL"] = os.environ["BENCH_BROKER_URL"]
setup_django("module-chain")

from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection
from django.utils import timezone

from fleet.models import Kyma, Module, ModuleConfig, ReconcileRecord, SyncResource
from fleet.services import modules as module_services
from kernel.api_tokens import api_token_create
from pki import services as pki
from runtime_emulator import EmulatorHost, crd_manifest
from runtime_emulator.kubelet import ProcessKubelet

GROUP, VERSION = "operator.kyma-project.io", "v1alpha1"


def reset() -> None:
    clear_fleet()  # the chain needs no Watcher
    Module.objects.filter(name__in=["keda", "keda-watch"]).delete()
    User.objects.filter(username="bench-manager").delete()
    pki.ca_bootstrap()
    for name in ("keda", "keda-watch"):
        keda_module(name)


def register(runtimes: list, prefix: str) -> list[Kyma]:
    for runtime in runtimes:
        runtime.register_crd(crd_manifest(GROUP, "Keda", versions=(VERSION,)))
    names = [f"{prefix}-{n:03d}" for n in range(len(runtimes))]
    return register_kymas(runtimes, names, modules=[{"name": "keda"}])


def replicas(runtime: object) -> int | None:
    deployment = runtime.get_object("Deployment", "keda-operator", "kyma-system")
    return deployment and deployment["spec"]["replicas"]


def converged(runtimes: list, kymas: list[Kyma], timeout: float = 300) -> None:
    """Until every runtime has the manager's Deployment and a reporting watcher."""
    ids = [k.pk for k in kymas]

    def done() -> bool:
        reporting = Kyma.objects.filter(pk__in=ids, watcher_contact__last_seen_at__isnull=False).count()
        return reporting == len(ids) and all(replicas(r) is not None for r in runtimes)

    converge(ids, done, lambda: f"{sum(replicas(r) is None for r in runtimes)} runtimes lack keda", timeout)


def last_record_id() -> int:
    return ReconcileRecord.objects.order_by("-pk").values_list("pk", flat=True).first() or 0


def set_replicas(value: int) -> object:
    return lambda obj: obj["spec"].update(replicas=value)


DEADLINE = 30.0  # seconds an edit may take before it counts as not applied


class Stages:
    """With ``--trace``: when each measured edit reached the ModuleConfig (event + first
    reconcile) and the SyncResource (watch + manager + API), polled by the edit's wait loop."""

    def __init__(self, kymas: dict[str, Kyma]) -> None:
        self.kymas = kymas
        self.config: list[float] = []
        self.sync: list[float] = []

    def poll(self, runtime: object, value: int, started: float, seen: dict[str, float]) -> None:
        kyma = self.kymas[runtime.name]
        if "config" not in seen:
            spec = ModuleConfig.objects.filter(kyma=kyma).values_list("spec", flat=True).first() or {}
            if spec.get("replicas") == value:
                seen["config"] = time.monotonic() - started
        if "sync" not in seen:
            manifests = SyncResource.objects.filter(kyma=kyma).values_list("manifests", flat=True).first()
            if manifests and f'"replicas": {value},' in manifests:
                seen["sync"] = time.monotonic() - started

    def add(self, seen: dict[str, float], total: float) -> None:
        self.config.append(seen.get("config", total))
        self.sync.append(seen.get("sync", total))

    def report(self, latencies: list[float]) -> None:
        steps = (
            ("edit -> ModuleConfig", self.config, [0.0] * len(self.config)),
            ("ModuleConfig -> SyncResource", self.sync, self.config),
            ("SyncResource -> runtime", latencies, self.sync),
        )
        slowest = max(range(len(latencies)), key=latencies.__getitem__)
        split = []
        for label, ends, starts in steps:
            spans = [max(0.0, end - start) for end, start in zip(ends, starts, strict=True)]
            print(f"    {label}: p50 {ms(spans, 50):.0f} ms, p99 {ms(spans, 99):.0f} ms")
            split.append(f"{spans[slowest] * 1000:.0f}")
        print(f"    the slowest edit ({latencies[slowest] * 1000:.0f} ms) by stage: {' / '.join(split)} ms")
        self.config, self.sync = [], []


def measure(
    runtimes: list,
    samples: int,
    values: itertools.count,
    *,
    give_up_after: int = 0,
    stages: Stages | None = None,
) -> tuple[list[float], int]:
    """Edit the keda CR in the runtimes one after another; seconds until the Deployment follows.

    An edit not applied within ``DEADLINE`` counts as ``DEADLINE`` (a lower bound). Returns the
    latencies and how many edits missed the deadline; with ``give_up_after`` the run stops after
    that many misses (the system is saturated: the p99 is then at least the deadline), else the
    first miss is an error."""
    latencies, missed = [], 0
    for index in range(samples):
        runtime = runtimes[index % len(runtimes)]
        value = next(values)
        started = time.monotonic()
        runtime.edit_as_user("Keda", "default", set_replicas(value), "kyma-system")
        seen: dict[str, float] = {}
        while replicas(runtime) != value and time.monotonic() - started < DEADLINE:
            if stages:
                stages.poll(runtime, value, started, seen)
            time.sleep(0.005)
        latencies.append(min(time.monotonic() - started, DEADLINE))
        if stages:
            stages.add(seen, latencies[-1])
        if replicas(runtime) != value:
            missed += 1
            if missed >= give_up_after:
                if not give_up_after:
                    raise TimeoutError(
                        f"{runtime.name}: replicas {value} not applied within {DEADLINE:.0f} s"
                    )
                break
    return latencies, missed


LOAD_THREADS = 8  # an edit waits on the runtime watcher's admission call: one thread reached ~25/s


def load(runtimes: list, rate: float, stop: threading.Event, done: list[int], slot: int) -> None:
    """Edits of these load runtimes' keda CRs at ``rate`` per second, round robin (one of
    ``LOAD_THREADS`` generators, each with its share of the runtimes and of the rate)."""
    interval, due = 1 / rate, time.monotonic()
    for runtime in itertools.cycle(runtimes):
        if stop.is_set():
            return
        runtime.edit_as_user("Keda", "default", set_replicas(random.randint(2, 9)), "kyma-system")
        done[slot] += 1
        due += interval
        stop.wait(max(0.0, due - time.monotonic()))


def role_usage(roles: dict[str, list[int]]) -> dict[str, float]:
    """CPU seconds so far per role; ``runtimes`` is this process and its other children: the
    emulated API servers, their runtime watcher processes and the load generators."""
    used = cpu_by_role({**roles, "all": [os.getpid()]}, {"postgres": "postgres"})
    used["runtimes"] = used.pop("all") - sum(used[role] for role in roles)
    return used


def report_usage(before: dict[str, float], after: dict[str, float], elapsed: float, edits: int) -> None:
    spent = {role: after[role] - before[role] for role in after}
    print(
        f"    CPU meanwhile ({sum(spent.values()) / elapsed:.2f} of {os.cpu_count()} cores), "
        f"per edit made: "
        + ", ".join(
            f"{role} {seconds / elapsed:.2f} cores {seconds * 1000 / max(edits, 1):.1f} ms"
            for role, seconds in sorted(spent.items(), key=lambda item: -item[1])
        )
    )


class LockWaits:
    """On PostgreSQL, samples twice a second which statements wait on a lock (``--trace``)."""

    def __init__(self) -> None:
        self.samples = 0
        self.waiting: dict[str, int] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> LockWaits:
        if connection.vendor == "postgresql":
            self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        if self.thread.is_alive():
            self.thread.join()

    def _run(self) -> None:
        try:
            while not self.stop.wait(0.5):
                with connection.cursor() as cursor:
                    cursor.execute(
                        "SELECT left(regexp_replace(query, '\\s+', ' ', 'g'), 70) FROM pg_stat_activity "
                        "WHERE datname = current_database() AND wait_event_type = 'Lock'"
                    )
                    rows = cursor.fetchall()
                self.samples += 1
                for (query,) in rows:
                    self.waiting[query] = self.waiting.get(query, 0) + 1
        finally:
            connection.close()

    def report(self) -> None:
        if not self.samples:
            return
        total = sum(self.waiting.values()) / self.samples
        print(f"    PostgreSQL sessions waiting on a lock: {total:.1f} on average")
        for query, count in sorted(self.waiting.items(), key=lambda item: -item[1])[:3]:
            print(f"      {count / self.samples:.1f} at: {query}")


def wait_quiet(since: int, quiet: float, limit: float = 180) -> float:
    """Seconds until the workers are done with what the load left (no reconcile started for
    ``quiet`` seconds), so (c) measures the fan-out to the watches, not the load's backlog."""
    started = time.monotonic()
    while time.monotonic() - started < limit:
        last = (
            ReconcileRecord.objects.filter(pk__gt=since)
            .order_by("-pk")
            .values_list("started_at", flat=True)
            .first()
        )
        if last is None or (timezone.now() - last).total_seconds() > quiet:
            break
        time.sleep(0.5)
    return time.monotonic() - started


def open_watch(port: int, key: str, since: int) -> http.client.HTTPResponse:
    while True:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        conn.request(
            "GET",
            f"/api/v1/moduleconfigs/?module=keda-watch&since_revision={since}&watch=true",
            headers={"Authorization": f"Token {key}"},
        )
        response = conn.getresponse()
        if response.status == 200:
            return response
        response.read()
        conn.close()
        time.sleep(0.05)  # 503: that process's watch threads are full, another has room


def workers_rss_kib(master: int) -> int:
    """Resident memory of the gunicorn master's worker processes (what open watches cost)."""
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if int((entry / "stat").read_text().rpartition(")")[2].split()[1]) != master:
                continue
            status = (entry / "status").read_text()
        except (OSError, ValueError, IndexError):
            continue
        total += next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")), 0)
    return total


def fan_out(port: int, key: str, watches: int, rounds: int, master: int) -> list[float]:
    """``watches`` open watches; per round one change; seconds from commit to each watch's line."""
    before = workers_rss_kib(master)
    kyma = Kyma.objects.create(namespace="kcp-system", name="watch-target", runtime_id="rt-watch-target")
    module = Module.objects.get(name="keda-watch")
    config, _ = module_services.moduleconfig_upsert(
        kyma=kyma, module=module, spec={"n": 0}, source_generation=0, source_resource_version=""
    )
    received: list[list[float]] = [[] for _ in range(watches)]
    ready = threading.Barrier(watches + 1)

    def follow(index: int) -> None:
        response = open_watch(port, key, config.revision)
        ready_sent = False
        for line in response:
            event = json.loads(line)
            if event["type"] == "BOOKMARK":
                if not ready_sent:
                    ready_sent = True
                    ready.wait()
                continue
            received[index].append(time.monotonic())
            if len(received[index]) == rounds:
                response.close()
                return

    threads = [threading.Thread(target=follow, args=(i,), daemon=True) for i in range(watches)]
    for thread in threads:
        thread.start()
    ready.wait(timeout=120)
    after = workers_rss_kib(master)
    print(
        f"web workers' memory: {before / 1024:.0f} MiB without watches, {after / 1024:.0f} MiB with "
        f"{watches} open ({(after - before) / watches:.0f} KiB per watch)"
    )
    latencies = []
    for number in range(1, rounds + 1):
        started = time.monotonic()
        module_services.moduleconfig_upsert(
            kyma=kyma, module=module, spec={"n": number}, source_generation=number, source_resource_version=""
        )
        deadline = time.monotonic() + 10
        while any(len(r) < number for r in received) and time.monotonic() < deadline:
            time.sleep(0.002)
        latencies += [r[number - 1] - started for r in received if len(r) >= number]
        missing = sum(len(r) < number for r in received)
        if missing:
            raise TimeoutError(f"round {number}: {missing} of {watches} watches did not see the change")
        time.sleep(0.2)
    return latencies


def ms(values: list[float], pct: float) -> float:
    return percentile(values, pct) * 1000


def report(label: str, latencies: list[float]) -> None:
    print(
        f"{label}: n={len(latencies)} p50 {ms(latencies, 50):.0f} ms, p99 {ms(latencies, 99):.0f} ms, "
        f"max {max(latencies) * 1000:.0f} ms, mean {statistics.mean(latencies) * 1000:.0f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--samples", type=int, default=100, help="measured edits per run")
    parser.add_argument("--runtimes", type=int, default=5, help="runtimes the measured edits go to")
    parser.add_argument("--load-runtimes", type=int, default=50, help="runtimes the background edits go to")
    parser.add_argument("--load-rate", type=float, default=100, help="background edits per second")
    parser.add_argument("--watches", type=int, default=100, help="open watches for (c)")
    parser.add_argument("--rounds", type=int, default=10, help="changes every watch must see in (c)")
    parser.add_argument("--workers", type=int, default=2, help="Celery worker processes")
    parser.add_argument(
        "--storm-samples",
        type=int,
        default=10,
        help="measured edits as the load starts, reported apart as (b0); (b) follows them",
    )
    parser.add_argument(
        "--trace", action="store_true", help="also print where each edit's time went (polls the database)"
    )
    parser.add_argument("--min-spacing", type=float, default=1.0, help="RECONCILE_MIN_SPACING of the workers")
    parser.add_argument(
        "--quiet",
        type=float,
        default=3.0,
        help="seconds without a reconcile starting: the load's backlog drained",
    )
    args = parse_args(
        parser,
        smoke={
            "samples": 2,
            "runtimes": 1,
            "load_runtimes": 2,
            "load_rate": 2.0,
            "watches": 2,
            "rounds": 1,
            "workers": 1,
            "storm_samples": 1,
            "min_spacing": 0.2,
            "quiet": 1.0,
        },
    )

    reset()
    directory = scratch_dir("bench-module-chain-")
    listener_port, web_port = free_port(), free_port()
    env = dict(os.environ, LISTENER_ACCESS_LOG="0", LISTENER_METRICS_BIND=f"127.0.0.1:{free_port()}")
    listener = start_listener(listener_port, env)
    web = spawn(
        [sys.executable, str(ROOT / "manage.py"), "serve", "web", "--bind", f"127.0.0.1:{web_port}"],
        env=dict(
            env,
            WEB_ACCESS_LOG="0",
            WEB_WORKERS="2",
            WEB_WATCH_THREADS=str(args.watches + 8),
            MODULECONFIG_WATCH_PER_CREDENTIAL=str(args.watches + 8),
        ),
        stdout=subprocess.DEVNULL,
    )
    wait_port(listener_port, listener)
    wait_port(web_port, web)
    workers = start_workers(
        args.workers,
        WATCHER_KCP_ADDR=f"localhost:{listener_port}",
        RECONCILE_MIN_SPACING=str(args.min_spacing),
        LOG_LEVEL="WARNING",
    )
    key = api_token_create(user=User.objects.create_superuser("bench-manager", password=None), name="bench")[
        1
    ]
    manager = spawn(
        [sys.executable, str(ROOT / "sdk" / "examples" / "keda_manager.py")],
        env=dict(
            os.environ,
            KCP_API=f"http://127.0.0.1:{web_port}/api/v1",
            KCP_TOKEN=key,
            STATE_FILE=str(directory / "keda.state"),
            PYTHONPATH=str(ROOT / "sdk"),
        ),
        stdout=subprocess.DEVNULL,
        stderr=(directory / "manager.log").open("w") if args.trace else subprocess.DEVNULL,
    )
    print(
        f"database: {database_label()}; broker: {os.environ.get('CELERY_BROKER_URL', 'filesystem')}; "
        f"{args.workers} worker processes ({settings.CELERY_WORKER_POOL} pool, "
        f"{settings.CELERY_WORKER_CONCURRENCY} slots each); {os.cpu_count()} CPUs; "
        f"RECONCILE_MIN_SPACING {args.min_spacing} s; RECONCILE_BUSY_SLOTS {settings.RECONCILE_BUSY_SLOTS}\n"
        f"{args.runtimes} measured runtimes, {args.load_runtimes} load runtimes, "
        "each with a watcher process\n"
    )
    kubelet = ProcessKubelet()
    try:
        with EmulatorHost(kubelet=kubelet) as host:
            try:
                measured = [host.create(f"mc-{n}") for n in range(args.runtimes)]
                loaded = [host.create(f"mc-load-{n}") for n in range(args.load_runtimes)]
                kymas = register(measured, "mc") + register(loaded, "mc-load")
                converged(measured + loaded, kymas)
                values = itertools.count(2)
                stages = (
                    Stages({r.name: k for r, k in zip(measured, kymas, strict=False)}) if args.trace else None
                )
                rest, _ = measure(measured, args.samples, values, stages=stages)
                report("(a) at rest", rest)
                if stages:
                    stages.report(rest)

                threads = min(LOAD_THREADS, len(loaded))
                stop, done = threading.Event(), [0] * threads
                generators = [
                    threading.Thread(
                        target=load,
                        args=(loaded[slot::threads], args.load_rate / threads, stop, done, slot),
                        daemon=True,
                    )
                    for slot in range(threads)
                ]
                roles = {
                    "workers": [w.pid for w in workers],
                    "web": [web.pid],
                    "listener": [listener.pid],
                    "manager": [manager.pid],
                }
                for generator in generators:
                    generator.start()
                if args.storm_samples:  # the storm's first seconds, before its runtimes count as busy
                    storm, _ = measure(measured, args.storm_samples, values, give_up_after=3, stages=stages)
                    report("(b0) as the storm starts", storm)
                    if stages:
                        stages.report(storm)
                started, since, usage = time.monotonic(), last_record_id(), role_usage(roles)
                made = sum(done)
                with LockWaits() if args.trace else contextlib.nullcontext() as locks:
                    busy, missed = measure(measured, args.samples, values, give_up_after=3, stages=stages)
                stop.set()
                for generator in generators:
                    generator.join()
                elapsed = time.monotonic() - started
                usage_after = role_usage(roles)
                rate = (sum(done) - made) / elapsed
                reconciles = ReconcileRecord.objects.filter(pk__gt=since).count() / elapsed
                report(f"(b) under {rate:.0f} edits/s across {args.load_runtimes} runtimes", busy)
                print(f"    the workers ran {reconciles:.1f} reconciles/s meanwhile")
                report_usage(usage, usage_after, elapsed, sum(done) - made + len(busy))
                if stages:
                    stages.report(busy)
                if locks:
                    locks.report()
                if missed:
                    print(
                        f"    saturated: {missed} of {len(busy)} edits not applied within {DEADLINE:.0f} s "
                        f"(counted as {DEADLINE:.0f} s: the p99 is a lower bound); (b) stopped there"
                    )
                print(f"    the load's backlog took {wait_quiet(since, args.quiet):.1f} s more to drain")
            finally:
                host.run(kubelet.aclose())
        watched = fan_out(web_port, key, args.watches, args.rounds, web.pid)
        report(f"(c) {args.watches} watches, {args.rounds} changes", watched)
    finally:
        stop_processes([manager, *workers, web, listener])
        if args.trace:  # what went wrong for the manager, if anything
            problems = [
                line for line in (directory / "manager.log").read_text().splitlines() if "retry" in line
            ]
            print(f"manager: {len(problems)} retried call(s)", *problems[:10], sep="\n    ")
    ratio = percentile(busy, 99) / percentile(rest, 99)
    print(f"\n(b)/(a) p99 = {ratio:.2f}; goals: (a) p99 <= 1000 ms, (b) p99 <= 2000 ms, (c) p99 <= 200 ms")
    print(
        f"module_chain: p50_ms={ms(rest, 50):.0f} p99_ms={ms(rest, 99):.0f} "
        f"loaded_p99_ms={ms(busy, 99):.0f} watch_p99_ms={ms(watched, 99):.0f}"
    )


if __name__ == "__main__":
    main()
