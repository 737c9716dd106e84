"""The listener over mutual TLS, driven by several client processes.

Reports events/s and p50/p99 latency for
  (a) WatchEvents with keep-alive connections (what our runtime watcher does),
  (b) WatchEvents with a new TLS handshake per event (what upstream's watcher does),
  (c) a bare gunicorn TLS "hello" app with the same TLS and worker settings: the ceiling,
  (d) WatchEvents with keep-alive, the same contract and services served through Django REST
      framework (bench/listener_drf: an authentication class reading the client certificate, a
      permission, a serializer) under the listener's own gunicorn configuration,
and the ratios (a)/(c), (a')/(c), (a)/(b) and (d)/(a). Goals: (a) >= 2,000 events/s on 2 cores,
(a)/(c) >= 0.5, (a')/(c) >= 0.6; the listener is served by DRF if (d)/(a) >= 0.8. The last line
is ``listener: a_per_s=X a_ratio=Y a2_ratio=Z drf_ratio=W``.

No worker consumes the queued reconciles here, so in (a) every Kyma's reconcile is overdue after
its first 0.1 s and an event asks the queue (one Redis round trip) unless one of the same
listener process did in the last 25 ms (``LISTENER_RECONCILE_DELAY`` less the margin and the
skew: that one made the overdue task wait the delay after it): the worst case, as when the
workers lag far behind. (a') repeats (a) with every event inside its
queued reconcile's window (LISTENER_RECONCILE_DELAY=60), i.e. without that round trip: what the
listener costs when workers keep up and a hot runtime's events fall inside the window.
The four keep-alive rows run side by side and take turns (``--rounds`` slices each), so the
ratios compare rows measured over the same minutes.

The database is SQLite under .state/bench-listener unless BENCH_DATABASE_URL is set; the broker is
the filesystem one unless BENCH_BROKER_URL is set (e.g. redis://127.0.0.1:6379/15).

    python bench/listener.py [--seconds 12] [--rounds 6] [--clients 4] [--threads 8] [--kymas 50] [--smoke]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import ssl
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from common import (
    ROOT,
    RawClient,
    database_label,
    free_port,
    parse_args,
    percentile,
    scratch_dir,
    setup_django,
    spawn,
    start_listener,
    stop_processes,
    wait_tls,
)

if os.environ.get("BENCH_BROKER_URL"):
    os.environ["CELERY_BROKER_URL"] = os.environ["BENCH_BROKER_URL"]
setup_django("listener")

from fleet.models import Kyma, ReconcileMark
from pki import selectors, services
from watchers.models import Watcher

HELLO_APP = """
def application(environ, start_response):
    environ["wsgi.input"].read()
    start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", "2")])
    return [b"{}"]
"""
BODY = json.dumps(
    {
        "watched": {"Namespace": "kyma-system", "Name": "default"},
        "watchedGvk": {"group": "operator.kyma-project.io", "version": "v1beta2", "kind": "Kyma"},
    }
).encode()


def prepare(kymas: int, directory: Path) -> list[tuple[str, str]]:
    """Kymas with certificates; returns (cert file, key file) per Kyma."""
    Kyma.objects.all().delete()
    Watcher.objects.get_or_create(
        component="lifecycle-manager",
        defaults={
            "namespace": "kcp-system",
            "name": "klm",
            "manager": "lifecycle-manager",
            "resource_to_watch": {"group": "operator.kyma-project.io", "version": "*", "resource": "kymas"},
            "service_info": {"name": "klm", "namespace": "kcp-system", "port": 8082},
        },
    )
    services.ca_bootstrap()
    files = []
    for number in range(kymas):
        kyma = Kyma.objects.create(
            name=f"bench-{number}",
            runtime_id=f"rt-bench-{number}",
            skr_domain=f"bench-{number}.kyma.example.com",
        )
        data = services.runtime_secret_data(services.certificate_for_kyma(kyma=kyma))
        cert, key = directory / f"{number}.crt", directory / f"{number}.key"
        cert.write_bytes(data["tls.crt"])
        key.write_bytes(data["tls.key"])
        files.append((str(cert), str(key)))
    (directory / "ca.crt").write_bytes(selectors.ca_bundle_pem())
    return files


def client_process(args: tuple) -> tuple[int, int, list[float]]:
    """One client process: ``threads`` threads posting for ``seconds``; returns (ok, failed, latencies)."""
    port, path, files, ca_file, seconds, threads, keep_alive = args
    request = (
        f"POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(BODY)}\r\n\r\n"
    ).encode() + BODY
    ok = failed = 0
    latencies: list[float] = []
    lock = threading.Lock()
    stop_at = time.monotonic() + seconds

    def run(index: int) -> None:
        nonlocal ok, failed
        cert, key = files[index % len(files)]
        context = ssl.create_default_context(cafile=ca_file)
        context.load_cert_chain(cert, key)
        client = RawClient(port, context, request)
        mine_ok = mine_failed = 0
        mine: list[float] = []
        while time.monotonic() < stop_at:
            started = time.perf_counter()
            try:
                status = client.post()
                if status == 200:
                    mine_ok += 1
                    mine.append(time.perf_counter() - started)
                else:
                    mine_failed += 1
            except (OSError, ValueError, IndexError):
                mine_failed += 1
                client.close()
            if not keep_alive:
                client.close()
        client.close()
        with lock:
            ok += mine_ok
            failed += mine_failed
            latencies.extend(mine)

    pool = [threading.Thread(target=run, args=(os.getpid() * 100 + i,)) for i in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    return ok, failed, latencies


def drive(
    port: int,
    path: str,
    files: list,
    ca_file: str,
    args: argparse.Namespace,
    keep_alive: bool,
    seconds: float,
) -> dict:
    jobs = [(port, path, files, ca_file, seconds, args.threads, keep_alive) for _ in range(args.clients)]
    # close + join, not the context manager's terminate: a client killed while it held the pool's
    # queue lock left a sibling waiting on it for ever, and terminate() waited for that sibling.
    pool = multiprocessing.get_context("fork").Pool(args.clients)
    try:
        results = pool.map(client_process, jobs)
    finally:
        pool.close()
        pool.join()
    return {
        "ok": sum(r[0] for r in results),
        "failed": sum(r[1] for r in results),
        "latencies": [x for _, _, lat in results for x in lat],
        "seconds": seconds,
    }


def summary(slices: list[dict]) -> dict:
    """One row's figures over all its slices."""
    latencies = sorted(x for part in slices for x in part["latencies"])
    ok = sum(part["ok"] for part in slices)
    return {
        "rate": ok / sum(part["seconds"] for part in slices),
        "ok": ok,
        "failed": sum(part["failed"] for part in slices),
        "p50": statistics.median(latencies) * 1000 if latencies else float("nan"),
        "p99": percentile(latencies, 99) * 1000 if latencies else float("nan"),
    }


def warm(port: int, path: str, files: list, ca_file: str) -> None:
    """A few requests on a few connections before measuring: every worker process and thread
    loads what it loads lazily (Django's URL resolver, DRF's settings, connections) untimed."""
    request = (
        f"POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(BODY)}\r\n\r\n"
    ).encode() + BODY
    for cert, key in files[:8]:
        context = ssl.create_default_context(cafile=ca_file)
        context.load_cert_chain(cert, key)
        client = RawClient(port, context, request)
        for _ in range(5):
            client.post()
        client.close()


@contextlib.contextmanager
def serving(server: subprocess.Popen, port: int, warm_up: tuple | None = None) -> Iterator[None]:
    """A started server, once it accepts connections (and answered ``warm_up``'s requests);
    stopped afterwards."""
    try:
        wait_tls(port, server)
        if warm_up is not None:
            warm(port, *warm_up)
        yield
    finally:
        stop_server(server)


def stop_server(server: subprocess.Popen) -> None:
    stop_processes([server])


def clear_marks() -> None:
    """Forget the "reconcile queued" marks the earlier runs left (nothing consumes their tasks)."""
    from fleet.queue.marks import RedisFlags, flags

    store = flags()
    if isinstance(store, RedisFlags):
        keys = list(store.client.scan_iter(match=store.key("*"), count=1000))
        if keys:
            store.client.delete(*keys)
    ReconcileMark.objects.all().delete()


def start_hello(port: int, directory: Path, env: dict) -> subprocess.Popen:
    (directory / "hello_app.py").write_text(HELLO_APP)
    tls_dir = Path(env["CONTROLPLANE_STATE_DIR"]) / "listener-tls"
    argv = [
        sys.executable,
        "-m",
        "gunicorn",
        "--chdir",
        str(directory),
        "--bind",
        f"127.0.0.1:{port}",
        "--worker-class",
        "gthread",
        "--workers",
        env["LISTENER_WORKERS"],
        "--threads",
        env["LISTENER_THREADS"],
        "--keep-alive",
        "75",
        "--certfile",
        str(tls_dir / "tls.crt"),
        "--keyfile",
        str(tls_dir / "tls.key"),
        "--ca-certs",
        str(tls_dir / "ca.crt"),
        "--cert-reqs",
        "2",
        "--no-control-socket",
        "hello_app:application",
    ]
    return spawn(argv, cwd=directory, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def start_drf(port: int, env: dict) -> subprocess.Popen:
    """The DRF variant under the listener's gunicorn configuration (same TLS, workers, threads)."""
    from listener.tls import prepare_listener_tls

    drf_env = {
        **env,
        **prepare_listener_tls(),
        "LISTENER_BIND": f"127.0.0.1:{port}",
        "LISTENER_MODE": "direct",
        "CONTROLPLANE_ROLE": "listener",
        "DJANGO_SETTINGS_MODULE": "bench.listener_drf.settings",
    }
    drf_env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    config = ROOT / "deploy" / "gunicorn" / "listener.py"
    argv = [sys.executable, "-m", "gunicorn", "-c", str(config), "bench.listener_drf.wsgi:application"]
    return spawn(argv, env=drf_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def report(label: str, result: dict) -> None:
    print(
        f"{label:58s} {result['rate']:8.0f} /s   p50 {result['p50']:6.2f} ms   p99 {result['p99']:7.2f} ms"
        f"   ({result['ok']} ok, {result['failed']} failed)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=12, help="per row, over all its rounds")
    parser.add_argument("--rounds", type=int, default=6, help="turns each keep-alive row takes")
    parser.add_argument("--clients", type=int, default=4, help="client processes")
    parser.add_argument("--threads", type=int, default=8, help="connections per client process")
    parser.add_argument("--kymas", type=int, default=50)
    parser.add_argument("--workers", default="2", help="listener gunicorn processes")
    parser.add_argument("--server-threads", default="8", help="threads per listener process")
    args = parse_args(
        parser,
        smoke={"seconds": 0.5, "rounds": 1, "clients": 1, "threads": 2, "kymas": 4, "workers": "1"},
    )

    directory = scratch_dir("bench-listener-")
    files = prepare(args.kymas, directory)
    ca_file = str(directory / "ca.crt")
    env = dict(
        os.environ,
        LISTENER_WORKERS=args.workers,
        LISTENER_THREADS=args.server_threads,
        LISTENER_ACCESS_LOG="0",
        LISTENER_METRICS_BIND=f"127.0.0.1:{free_port()}",
        PYTHONUNBUFFERED="1",
    )
    print(f"database: {database_label()}; broker: {os.environ.get('CELERY_BROKER_URL', 'filesystem')}")
    print(
        f"{args.clients} client processes x {args.threads} connections, {args.seconds:g} s each, "
        f"{args.workers} listener workers, {os.cpu_count()} CPUs\n"
    )

    path = "/v2/lifecycle-manager/event"
    port = free_port()
    # The keep-alive rows run side by side and take turns, ``--rounds`` slices each, so that a
    # machine whose speed drifts during the run (other load, CPU clocks) weighs on every row alike.
    # (a') keeps its queue marks under a prefix of its own: its reconciles stay queued 60 s.
    ports = {row: free_port() for row in ("a", "d", "a2", "c")}
    slices: dict[str, list[dict]] = {row: [] for row in ports}
    with contextlib.ExitStack() as stack:
        # Every server starts at once (all stopped, even when one of them fails to start); (b)
        # runs once all of them serve, on a listener of its own, which goes after it.
        fresh_server = start_listener(port, env)
        stack.callback(stop_server, fresh_server)
        rows = {
            "a": (
                start_listener(ports["a"], dict(env, LISTENER_METRICS_BIND=f"127.0.0.1:{free_port()}")),
                path,
            ),
            # The same contract through DRF, in the same state as (a): every event asks the queue.
            "d": (start_drf(ports["d"], env), path),
            "a2": (
                start_listener(
                    ports["a2"],
                    dict(
                        env,
                        LISTENER_METRICS_BIND=f"127.0.0.1:{free_port()}",
                        LISTENER_RECONCILE_DELAY="60",
                        RECONCILE_FLAGS_PREFIX=f"bench-covered-{os.getpid()}",
                    ),
                ),
                path,
            ),
            "c": (start_hello(ports["c"], directory, env), "/"),
        }
        for server, _ in rows.values():
            stack.callback(stop_server, server)
        for row, (server, _) in rows.items():
            wait_tls(ports[row], server)
        with serving(fresh_server, port, (path, files, ca_file)):
            fresh = summary([drive(port, path, files, ca_file, args, False, args.seconds)])
        report("(b) WatchEvents, new TLS handshake per event (upstream)", fresh)
        clear_marks()
        for row, (server, row_path) in rows.items():
            stack.enter_context(serving(server, ports[row], (row_path, files, ca_file)))
        for _ in range(args.rounds):
            for row, (_, row_path) in rows.items():
                part = drive(ports[row], row_path, files, ca_file, args, True, args.seconds / args.rounds)
                slices[row].append(part)
    keep, drf, covered, ceiling = (summary(slices[row]) for row in ("a", "d", "a2", "c"))
    report("(a) WatchEvents, keep-alive", keep)
    report("(d) WatchEvents, keep-alive, served through DRF", drf)
    report("(a') WatchEvents, keep-alive, no queue round trip", covered)
    report("(c) bare gunicorn TLS hello, keep-alive (ceiling)", ceiling)
    a_ratio, a2_ratio = keep["rate"] / ceiling["rate"], covered["rate"] / ceiling["rate"]
    drf_ratio = drf["rate"] / keep["rate"]
    print(f"\n(a)/(c) = {a_ratio:.2f}   (goal >= 0.5)")
    print(f"(a')/(c) = {a2_ratio:.2f}   (without the per-event queue check; goal >= 0.6)")
    print(f"(a)/(b) = {keep['rate'] / fresh['rate']:.1f}x faster than a handshake per event")
    print(f"(d)/(a) = {drf_ratio:.2f}   (DRF against the bespoke application; DRF serves if >= 0.8)")
    print(f"(a) >= 2,000 events/s: {'yes' if keep['rate'] >= 2000 else 'NO'}")
    print(
        f"listener: a_per_s={keep['rate']:.0f} a_ratio={a_ratio:.2f} a2_ratio={a2_ratio:.2f} "
        f"drf_ratio={drf_ratio:.2f}"
    )


if __name__ == "__main__":
    main()
