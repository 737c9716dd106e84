"""Kill anything, lose nothing: the control plane under random SIGKILLs and a broker outage.

Runs two of every role (web, listener, worker, beat; each in a session of its own, as a pod) on a
Redis of its own (broker and queue marks; an append-only file, as a production broker needs) and
the bench database, with ``--runtimes`` emulated runtimes whose runtime watchers are real
processes sending to the listeners through a small TCP balancer (what a Service does: new
connections go to the Ready listeners only; a killed listener leaves a second later and comes back when
its readiness probe passes). Then, for ``--duration`` seconds:

- a steady stream of runtime edits: every ``--edit-every`` seconds the Kyma inside a random
  runtime changes channel (regular <-> fast), as its user would;
- every ``--kill-every`` seconds one role process chosen at random is killed with SIGKILL (its
  whole process group: a pod lost) and started again at once; the leading beat only while the
  other beat stands by (both beats lost at once leave no standby to take over: the takeover
  then waits for a restart, on this machine up to a minute), and no process at all while a
  killed leader's takeover is awaited (so K counts fewer kills than duration / interval);
- ``--outages`` times (evenly spread) Redis is stopped for a random 10-30 s (``--outage``) and
  started again (``--broker rabbitmq``: a RabbitMQ node of its own instead). No process is
  killed from shortly before an outage until 20 s after the broker is back (the reconciles of the
  edits up to 10 s after it, which it measures, are done by then), so that the outage is measured
  on its own: before the broker stops, the kills pause until every process killed earlier serves
  again (on a loaded 2-core machine a listener takes 30-45 s from its start to its first
  answer) and every runtime watcher has emptied its queue once (a watcher still backing off from
  listeners killed earlier would otherwise wait up to its 30 s cap whatever the outage does).

Then the edits stop and the fleet settles (at most ``--settle`` seconds: until every runtime has
converged and every runtime's last edit is followed by a reconcile; converging alone is not
enough, as an even number of edits in flight leaves a runtime where it was), and it checks:

- every runtime converged to its last edit: the control plane's copy of each Kyma has the
  channel the runtime has (C of N);
- every event answered 200 reached a reconcile: each edit was followed by a reconcile of its
  Kyma that started after it (an edit with none is lost: L); E is the events the listeners
  answered 200 (the runtime watchers' own count);
- beat: each time the leading beat was killed, how long until another held the lease (p99: F),
  and that no periodic sweep was missed for longer than that: the claimed ticks of the sweep,
  read from its row every 0.2 s, never further apart than the longest takeover plus its interval;
- after the broker's return: for every edit made while Redis was away or within 10 s after it
  came back, the time from the later of the edit and the return to the start of its reconcile
  (p99: R).

- every edit, the whole run: the time from the edit to the start of the first reconcile of its
  Kyma after it (p99: P, max: M), workers being killed meanwhile: a reconcile killed mid-run
  holds its Kyma only until its lease runs out (``RECONCILE_LEASE_SECONDS``, renewed while it
  runs), then beat's sweep queues it again. The time the broker was away between the edit and
  the reconcile does not count (nothing can be queued then; R measures those edits on their own).

Goals: L = 0, C = N, F <= 15, R <= 10, M <= 20. The last line is exactly (one line, wrapped here)::

    chaos: duration_s=D kills=K broker_outages=O events=E lost=L converged=C/N \
           beat_takeover_p99_s=F after_broker_p99_s=R edit_reconcile_p99_s=P edit_reconcile_max_s=M

The roles run with the production settings (``--visibility`` sets ``CELERY_VISIBILITY_TIMEOUT``
to try another), except that a Ready Kyma is not reconciled periodically during the run: a
periodic reconcile would hide an event that was lost.

    BENCH_DATABASE_URL=postgres://postgres@127.0.0.1:5432/bench python bench/chaos.py [--duration 300]
    python bench/chaos.py --smoke
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import functools
import itertools
import os
import random
import shutil
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from common import (
    ROOT,
    clear_fleet,
    database_label,
    free_port,
    klm_watcher,
    parse_args,
    percentile,
    register_kymas,
    setup_django,
    spawn,
    state_dir,
    stop_processes,
)


class RedisServer:
    """``redis-server`` of this benchmark's own (never the shared one), with an append-only file."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.directory.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def answers(self) -> bool:
        with socket.socket() as sock:
            sock.settimeout(1)
            try:
                sock.connect(("127.0.0.1", self.port))
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
            except OSError:
                return False

    def start(self) -> None:
        argv = [
            shutil.which("redis-server") or "redis-server",
            "--bind",
            "127.0.0.1",
            "--port",
            str(self.port),
        ]
        argv += [
            "--dir",
            str(self.directory),
            "--appendonly",
            "yes",
            "--appendfsync",
            "everysec",
            "--save",
            "",
        ]
        self.proc = spawn(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while not self.answers():
            if time.monotonic() > deadline:
                raise TimeoutError("redis-server did not answer")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is not None:
            stop_processes([self.proc], timeout=20)  # SIGTERM: it writes its file and exits
            self.proc = None

    def close(self) -> None:
        """After the last stop (nothing else of it runs)."""


class RabbitNode:
    """A RabbitMQ node of this benchmark's own (``--broker rabbitmq``): its own ports, epmd,
    cookie and data directory; stopping it is a broker outage like stopping Redis."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.directory.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.name = f"chaos{os.getpid()}@localhost"
        self.overrides = {
            "HOME": str(directory),
            "RABBITMQ_NODENAME": self.name,
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_DIST_PORT": str(free_port()),
            "ERL_EPMD_PORT": str(free_port()),
            "RABBITMQ_MNESIA_BASE": str(directory / "mnesia"),
            "RABBITMQ_LOG_BASE": str(directory / "log"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(directory / "enabled_plugins"),
            "RABBITMQ_CONFIG_FILE": str(directory / "rabbitmq"),
        }
        (directory / "enabled_plugins").write_text("[].\n")
        # Celery holds ETA tasks unacknowledged in the worker: no 30-minute consumer timeout here.
        (directory / "rabbitmq.conf").write_text("consumer_timeout = 86400000\n")
        self.proc: subprocess.Popen | None = None

    @property
    def env(self) -> dict[str, str]:
        # Read when the node starts, after setup_django: the node and the epmd it starts (a
        # daemon outside the node's session) carry the run's mark and are stopped on any exit.
        return {**os.environ, **self.overrides}

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}//"

    def answers(self) -> bool:
        with socket.socket() as sock:
            sock.settimeout(1)
            try:
                sock.connect(("127.0.0.1", self.port))
                sock.sendall(b"AMQP\x00\x00\x09\x01")
                return len(sock.recv(8)) > 0
            except OSError:
                return False

    def start(self) -> None:
        # (Debian's /usr/sbin wrappers switch to the rabbitmq user and drop this environment)
        server = next(
            (p for p in ("/usr/lib/rabbitmq/bin/rabbitmq-server",) if Path(p).exists()),
            shutil.which("rabbitmq-server") or "rabbitmq-server",
        )
        with open(self.directory / "server.log", "a") as log:
            self.proc = spawn([server], env=self.env, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while not self.answers():
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError(f"rabbitmq-server did not answer (see {self.directory / 'server.log'})")
            time.sleep(0.2)

    def stop(self) -> None:
        if self.proc is not None:
            control = "/usr/lib/rabbitmq/bin/rabbitmqctl"
            subprocess.run(
                [control if Path(control).exists() else "rabbitmqctl", "-n", self.name, "stop"],
                env=self.env,
                capture_output=True,
                timeout=60,
                check=False,
            )
            stop_processes([self.proc], timeout=20)
            self.proc = None

    def close(self) -> None:
        """After the last stop: end the node's epmd (stopping the node leaves it running)."""
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run(
                [shutil.which("epmd") or "epmd", "-kill"],
                env=self.env,
                capture_output=True,
                timeout=10,
                check=False,
            )


_CHOSEN = sys.argv[sys.argv.index("--broker") + 1] if "--broker" in sys.argv[:-1] else "redis"
_BROKER_DIR = Path(tempfile.mkdtemp(prefix=f"bench-chaos-{_CHOSEN}-"))
BROKER = RabbitNode(_BROKER_DIR) if _CHOSEN == "rabbitmq" else RedisServer(_BROKER_DIR)
os.environ["CELERY_BROKER_URL"] = BROKER.url  # (started below, once the run is set up)
os.environ.setdefault("WATCHER_SILENT_AFTER", "3600")
setup_django("chaos")
BROKER.start()

from django.db import connection
from django.db.models import Max
from django.utils import timezone
from django_celery_beat.models import PeriodicTask

from controlplane.beat import LEASE_NAME
from controlplane.leases import lease_current
from fleet.models import Kyma, ReconcileRecord, ReconcileState
from listener.models import WatchEventRecord
from pki import services as pki
from runtime_emulator import EmulatorHost
from runtime_emulator.kubelet import ProcessKubelet

ROLES = ("web", "listener", "worker", "beat")
SWEEP = "reconcile-due"


class Balancer:
    """A TCP balancer in front of the listeners, as a Kubernetes Service is: each new connection
    goes to the next *Ready* listener (bytes copied both ways). As the kubelet and the endpoints
    controller do: a listener leaves at once when its process dies (``down``), and comes back
    when its readinessProbe (the side port's ``/readyz``, every ``PROBE_PERIOD`` seconds as in
    ``deploy/kubernetes/base/listener.yaml``) answers 200. With no listener Ready, a connection is
    refused, as a Service without endpoints refuses it."""

    PROBE_PERIOD = 5.0

    def __init__(self, backends: dict[int, int]) -> None:
        self.backends = list(backends)  # listener port -> its side port
        self.probes = backends
        self.ready: set[int] = set()
        self.turn = itertools.count()
        self.closed = threading.Event()
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True, name="balancer").start()
        threading.Thread(target=self._probe, daemon=True, name="balancer-probes").start()

    def down(self, backend: int) -> None:
        self.ready.discard(backend)

    def probe(self) -> set[int]:
        """Probe every listener once now (as the periodic probe does); returns those Ready."""
        for backend, side in self.probes.items():
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{side}/readyz", timeout=5) as answer:
                    ok = answer.status == 200
            except OSError:
                ok = False
            (self.ready.add if ok else self.ready.discard)(backend)
        return self.ready & set(self.probes)

    def _probe(self) -> None:
        while not self.closed.is_set():
            self.probe()
            self.closed.wait(self.PROBE_PERIOD)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        start = next(self.turn)
        for offset in range(len(self.backends)):
            port = self.backends[(start + offset) % len(self.backends)]
            if port not in self.ready:
                continue
            try:
                backend = socket.create_connection(("127.0.0.1", port), timeout=1)
            except OSError:
                continue
            backend.settimeout(None)
            threading.Thread(target=self._copy, args=(backend, client), daemon=True).start()
            self._copy(client, backend)
            return
        client.close()

    @staticmethod
    def _copy(source: socket.socket, target: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                target.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, target):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()

    def close(self) -> None:
        self.closed.set()
        self.server.close()


class Fleet:
    """The role processes: two of each, started, killed and restarted by name."""

    def __init__(self, env: dict[str, str], ports: dict[str, int], balancer: Balancer) -> None:
        self.env = env
        self.ports = ports
        self.balancer = balancer
        self.procs: dict[str, subprocess.Popen] = {}
        self.log_start: dict[str, int] = {}

    def argv(self, name: str) -> tuple[list[str], dict[str, str]]:
        role, number = name.rsplit("-", 1)
        python, manage = sys.executable, str(ROOT / "manage.py")
        if role == "web":
            return [python, manage, "serve", "web", "--bind", f"127.0.0.1:{self.ports[name]}"], {}
        if role == "listener":
            metrics = f"127.0.0.1:{self.ports[name + '-metrics']}"
            bind = f"127.0.0.1:{self.ports[name]}"
            return [python, manage, "serve", "listener", "--bind", bind], {"LISTENER_METRICS_BIND": metrics}
        celery = [python, "-m", "celery", "-A", "controlplane"]
        if role == "worker":
            return [*celery, "worker", "-n", f"chaos{number}@%h", "--loglevel", "INFO"], {}
        return [*celery, "beat", "--loglevel", "INFO"], {}

    def start(self, name: str) -> None:
        argv, extra = self.argv(name)
        log_path = state_dir() / f"{name}.log"
        self.log_start[name] = log_path.stat().st_size if log_path.exists() else 0
        with open(log_path, "a") as log:
            self.procs[name] = spawn(argv, env={**self.env, **extra}, stdout=log, stderr=subprocess.STDOUT)

    def standing_by(self, name: str) -> bool:
        """Whether this beat, since its last start, stood by or led (it watches the lease)."""
        since = self._log_since_start(name)
        return "standing by; beat" in since or "leading since" in since

    def _log_since_start(self, name: str) -> str:
        with open(state_dir() / f"{name}.log", errors="replace") as log:
            log.seek(self.log_start.get(name, 0))
            return log.read()

    def serves(self, name: str) -> bool:
        """Whether this process, since its last start, does its work: a web worker answers
        /healthz, a listener's worker takes a TLS handshake (the gunicorn master listens long
        before its worker has loaded the app), a Celery worker said it is ready, a beat watches
        the lease."""
        role = name.rsplit("-", 1)[0]
        if self.procs[name].poll() is not None:
            return False
        if role == "web":
            url = f"http://127.0.0.1:{self.ports[name]}/healthz"
            try:
                return urllib.request.urlopen(url, timeout=2).status == 200
            except OSError:
                return False
        if role == "listener":
            context = ssl.create_default_context()
            context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
            try:
                with (
                    socket.create_connection(("127.0.0.1", self.ports[name]), timeout=2) as raw,
                    context.wrap_socket(raw, server_hostname="localhost"),
                ):
                    return True
            except ssl.SSLError:
                return True  # a worker answered (refusing a client without a certificate)
            except OSError:
                return False
        if role == "worker":
            return " ready." in self._log_since_start(name)
        return self.standing_by(name)

    def wait_serving(self, timeout: float) -> None:
        """Until every process serves and the balancer counts every listener Ready: the runtime
        watchers, which start with their runtimes, then reach a listener with their first
        heartbeat (a failed one is tried again only a heartbeat interval later)."""
        deadline = time.monotonic() + timeout
        listeners = {self.ports[name] for name in self.procs if name.startswith("listener")}
        while not (all(self.serves(name) for name in self.procs) and self.balancer.probe() >= listeners):
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    said = self._log_since_start(name)[-3000:]
                    raise RuntimeError(f"{name} exited with {proc.returncode}:\n{said}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"not every role serves after {timeout:.0f} s (logs in {state_dir()})")
            time.sleep(0.1)

    def kill(self, name: str) -> None:
        proc = self.procs[name]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
        if name.startswith("listener"):
            # The kubelet sees the container gone and the Service's endpoints follow: about a second.
            threading.Timer(1.0, self.balancer.down, args=(self.ports[name],)).start()

    def leading_beat(self) -> str | None:
        lease = lease_current(LEASE_NAME)
        if lease is None or lease.expires_at is None or lease.expires_at <= timezone.now():
            return None
        pid = lease.holder.rpartition(":")[2]
        return next((name for name, proc in self.procs.items() if str(proc.pid) == pid), None)

    def stop(self) -> None:
        stop_processes(list(self.procs.values()))


def reset() -> None:
    clear_fleet()
    klm_watcher()
    pki.ca_bootstrap()


def register(runtimes: list) -> list[Kyma]:
    return register_kymas(runtimes, [runtime.name for runtime in runtimes])


def converged(runtimes: list, kymas: dict[str, int]) -> int:
    """How many runtimes the control plane agrees with (its copy has the runtime's channel)."""
    return len(runtimes) - len(differing(runtimes, kymas))


def differing(runtimes: list, kymas: dict[str, int]) -> list[str]:
    """The runtimes whose Kyma the control plane's copy does not match, each described."""
    copies = {
        pk: (channel, generation, seen)
        for pk, channel, generation, seen in Kyma.objects.filter(pk__in=kymas.values()).values_list(
            "pk", "channel", "generation", "runtime_sync__runtime_kyma_generation"
        )
    }
    found = []
    for runtime in runtimes:
        live = runtime.get_object("Kyma", "default", "kyma-system") or {}
        channel = (live.get("spec") or {}).get("channel", "regular")
        copy = copies.get(kymas[runtime.name], (None, None, None))
        if copy[0] != channel:
            meta = live.get("metadata") or {}
            found.append(
                f"{runtime.name}: runtime channel {channel} (generation {meta.get('generation')}, "
                f"resourceVersion {meta.get('resourceVersion')}), control plane {copy[0]} (generation "
                f"{copy[1]}, runtime generation last seen {copy[2]})"
            )
    return found


def unreconciled(edits: list[tuple[str, float]], kymas: dict[str, int]) -> int:
    """How many edited runtimes have no reconcile started after their last edit (yet)."""
    last_edit: dict[str, float] = {}
    for name, at in edits:
        last_edit[name] = max(at, last_edit.get(name, 0.0))
    latest = dict(
        Kyma.objects.filter(pk__in=[kymas[name] for name in last_edit])
        .annotate(latest=Max("reconciles__started_at"))
        .values_list("pk", "latest")
    )
    return sum(
        1
        for name, at in last_edit.items()
        if latest.get(kymas[name]) is None or latest[kymas[name]].timestamp() <= at
    )


def records_written(ids: list[int], deadline: float) -> None:
    """Until the reconciles still running have written their records (a batch writes them at its
    end): no Kyma's lease is held, and the records counted did not change since the last look."""
    seen = -1
    while time.monotonic() < deadline:
        held = ReconcileState.objects.filter(kyma_id__in=ids, lease_until__gt=timezone.now()).exclude(
            lease_owner=""
        )
        count = ReconcileRecord.objects.filter(kyma_id__in=ids).count()
        if count == seen and not held.exists():
            return
        seen = count
        time.sleep(0.2)


def wait_ready(kymas: list[Kyma], timeout: float) -> None:
    """Until every Kyma is Ready and its watcher reported (the runtime watchers run)."""
    ids = [k.pk for k in kymas]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready = Kyma.objects.filter(
            pk__in=ids, state="Ready", watcher_contact__last_seen_at__isnull=False
        ).count()
        if ready == len(ids):
            return
        time.sleep(0.2)
    raise TimeoutError(
        f"not every Kyma Ready with a reporting watcher in {timeout:.0f} s (logs in {state_dir()})"
    )


def watcher_sent(host: EmulatorHost, kubelet: ProcessKubelet) -> int:
    """Events the listeners answered 200, as the runtime watchers count them."""
    total = 0
    for runtime in host:
        pod = kubelet.pod(runtime.name)
        if pod is None:
            continue
        try:
            text = urllib.request.urlopen(pod.metrics_url(), timeout=5).read().decode()
        except OSError:
            continue
        for line in text.splitlines():
            if line.startswith("watcher_events_sent_total "):
                total += int(float(line.split()[1]))
    return total


def watchers_idle(host: EmulatorHost, kubelet: ProcessKubelet) -> set[str]:
    """The runtimes whose watcher has nothing waiting to be sent now."""
    idle = set()
    for runtime in host:
        pod = kubelet.pod(runtime.name)
        if pod is None:
            continue
        try:
            text = urllib.request.urlopen(pod.metrics_url(), timeout=5).read().decode()
        except (OSError, ValueError):
            continue
        for line in text.splitlines():
            if line.startswith("watcher_send_queue_depth ") and float(line.split()[1]) == 0:
                idle.add(runtime.name)
    return idle


def all_serving(
    fleet: Fleet,
    host: EmulatorHost,
    kubelet: ProcessKubelet,
    ready: threading.Event,
    given_up: threading.Event,
) -> None:
    """Sets ``ready`` once every role process serves and every runtime watcher has been seen
    with an empty queue (a thread of its own: the edits go on at their pace meanwhile)."""
    idle: set[str] = set()
    while not given_up.is_set():
        if all(fleet.serves(name) for name in list(fleet.procs)):
            idle |= watchers_idle(host, kubelet)
            if len(idle) == len(host):
                ready.set()
                return
        given_up.wait(0.5)


class Sweeps:
    """The sweep's claimed ticks, read from its row every 0.2 s (each claim moves last_run_at)."""

    def __init__(self) -> None:
        self.seen: list[dt.datetime] = []
        self.stop = threading.Event()
        threading.Thread(target=self._run, daemon=True, name="sweeps").start()

    def _run(self) -> None:
        while not self.stop.wait(0.2):
            with contextlib.suppress(Exception):
                value = PeriodicTask.objects.filter(name=SWEEP).values_list("last_run_at", flat=True).first()
                if value is not None and (not self.seen or value != self.seen[-1]):
                    self.seen.append(value)
        connection.close()

    def longest_gap(self) -> float:
        return (
            max((b - a).total_seconds() for a, b in itertools.pairwise(self.seen))
            if len(self.seen) > 1
            else 0.0
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--duration", type=float, default=300, help="seconds of kills and edits")
    parser.add_argument(
        "--runtimes", type=int, default=50, help="emulated runtimes, each with a watcher process"
    )
    parser.add_argument("--edit-every", type=float, default=0.25, help="seconds between runtime edits")
    parser.add_argument("--kill-every", type=float, default=4, help="seconds between two kills")
    parser.add_argument("--outages", type=int, default=1, help="times Redis is stopped")
    parser.add_argument("--outage", default="10-30", help="seconds each outage lasts: MIN-MAX")
    parser.add_argument(
        "--calm",
        type=float,
        default=180,
        help="longest wait, kills paused, for every role to serve before an outage",
    )
    parser.add_argument("--settle", type=float, default=240, help="longest wait for the fleet to converge")
    parser.add_argument("--visibility", type=int, default=600, help="CELERY_VISIBILITY_TIMEOUT of the roles")
    parser.add_argument("--seed", type=int, default=None, help="random seed (kills, edits, outages)")
    parser.add_argument(
        "--broker",
        choices=["redis", "rabbitmq"],
        default="redis",
        help="the broker of the run, a server of its own (queue marks: Redis with redis, else the database)",
    )
    args = parse_args(
        parser,
        smoke={
            "duration": 6.0,
            "runtimes": 2,
            "edit_every": 1.0,
            "kill_every": 2.0,
            "outage": "2-2",
            "calm": 30.0,
            "settle": 90.0,
        },
    )
    rng = random.Random(args.seed)
    low, _, high = args.outage.partition("-")
    outage_range = (float(low), float(high or low))
    reset()
    ports = {f"web-{n}": free_port() for n in (1, 2)}
    for n in (1, 2):
        ports[f"listener-{n}"], ports[f"listener-{n}-metrics"] = free_port(), free_port()
    balancer = Balancer({ports[f"listener-{n}"]: ports[f"listener-{n}-metrics"] for n in (1, 2)})
    env = {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "LOG_LEVEL": "INFO",
        "WEB_WORKERS": "1",
        "LISTENER_WORKERS": "1",
        "WORKER_CONCURRENCY": "8",
        "WATCHER_KCP_ADDR": f"localhost:{balancer.port}",
        "CELERY_VISIBILITY_TIMEOUT": str(args.visibility),
        # Only the edits' events reconcile a Ready Kyma during the run: a periodic reconcile
        # would hide an event that was lost.
        "RECONCILE_READY_INTERVAL": "86400",
        "WATCHER_HEARTBEAT_INTERVAL": "30",
        # (the smoke: a runtime still Processing at its first reconciles is looked at again
        # after 1 s, not 5 s, on its way to Ready)
        **({"RECONCILE_PROCESSING_INTERVAL": "1"} if args.smoke else {}),
    }
    fleet = Fleet(env, ports, balancer)
    names = [f"{role}-{n}" for role in ROLES for n in (1, 2)]
    print(
        f"database: {database_label()}; broker: {os.environ['CELERY_BROKER_URL']} (its own); "
        "two of every role; "
        f"{args.runtimes} runtimes with a watcher process; {args.duration:.0f} s of kills every "
        f"{args.kill_every:g} s and edits every {args.edit_every:g} s; {args.outages} broker outage(s) "
        f"of {args.outage} s; {os.cpu_count()} CPUs",
        flush=True,
    )
    kubelet = ProcessKubelet()
    try:
        for name in names:
            fleet.start(name)
        fleet.wait_serving(timeout=180)
        with EmulatorHost(kubelet=kubelet) as host:
            try:
                result = run(host, kubelet, fleet, args, rng, outage_range)
            finally:
                host.run(kubelet.aclose())
    finally:
        fleet.stop()
        balancer.close()
        BROKER.stop()
        BROKER.close()
        shutil.rmtree(BROKER.directory, ignore_errors=True)
    report(result)


def watch_takeover(
    watch: tuple[float, int] | None, takeovers: list[float], started: float
) -> tuple[float, int] | None:
    """After the leading beat was killed (``watch``: when, and the term it held): once another
    holds the lease, note how long that took; returns what is still to watch."""
    if watch is None:
        return None
    lease = lease_current(LEASE_NAME)
    if lease is None or lease.term <= watch[1] or lease.expires_at <= timezone.now():
        return watch
    takeovers.append(time.monotonic() - watch[0])
    print(f"  {time.monotonic() - started:6.1f} s: beat taken over after {takeovers[-1]:.1f} s", flush=True)
    return None


def run(host, kubelet, fleet: Fleet, args, rng: random.Random, outage_range: tuple[float, float]) -> dict:
    runtimes = [host.create(f"chaos-{n:03d}") for n in range(args.runtimes)]
    kymas = {k.name: k.pk for k in register(runtimes)}
    wait_ready(list(Kyma.objects.all()), timeout=600)
    print(
        f"{len(runtimes)} runtimes Ready, their watchers reporting; chaos for {args.duration:.0f} s",
        flush=True,
    )
    sweeps = Sweeps()
    edits: list[tuple[str, float]] = []  # (runtime, time.time() just before the edit)
    kills: list[str] = []
    killed_at: list[tuple[str, float]] = []  # (process, time.time() of the kill)
    takeovers: list[float] = []
    outages: list[tuple[float, float]] = []  # (stopped, back) in time.time()
    started, started_wall = time.monotonic(), time.time()
    ends = started + args.duration
    outage_at = [started + args.duration * (i + 1) / (args.outages + 1) for i in range(args.outages)]
    next_kill, next_edit, calm_until = started + args.kill_every, started, 0.0
    takeover_watch: tuple[float, int] | None = None  # (killed at, the term it held)

    def toggle(obj: dict) -> None:
        obj["spec"]["channel"] = "fast" if obj["spec"].get("channel") != "fast" else "regular"

    def edit_until(done, timeout: float) -> bool:
        """Go on editing (and watching a takeover) until ``done()`` or ``timeout`` seconds."""
        nonlocal takeover_watch
        stop_at = time.monotonic() + timeout
        while time.monotonic() < stop_at:
            if done():
                return True
            runtime = rng.choice(runtimes)
            edits.append((runtime.name, time.time()))
            runtime.edit_as_user("Kyma", "default", toggle, "kyma-system")
            takeover_watch = watch_takeover(takeover_watch, takeovers, started)
            time.sleep(args.edit_every)
        return False

    def calm(ready: threading.Event) -> bool:
        return ready.is_set() and takeover_watch is None

    while time.monotonic() < ends:
        now = time.monotonic()
        if outage_at and now >= outage_at[0]:
            outage_at.pop(0)
            # Kills pause; the outage starts once every role serves again and every runtime
            # watcher has emptied its queue (its backoff reset by a success).
            waited = time.monotonic()
            ready, given_up = threading.Event(), threading.Event()
            threading.Thread(
                target=all_serving, args=(fleet, host, kubelet, ready, given_up), daemon=True
            ).start()
            calmed = edit_until(functools.partial(calm, ready), args.calm)
            given_up.set()
            if not calmed:
                print(f"  (after {args.calm:.0f} s, not every role serves yet: the outage starts anyway)")
            length = rng.uniform(*outage_range)
            down = time.time()
            BROKER.stop()
            print(
                f"  {time.monotonic() - started:6.1f} s: broker stopped for {length:.0f} s (after "
                f"{time.monotonic() - waited:.0f} s without kills)",
                flush=True,
            )
            edit_until(lambda: False, length)  # the edits go on meanwhile
            BROKER.start()
            outages.append((down, time.time()))
            calm_until = time.monotonic() + 20
            continue
        if now >= next_edit:
            runtime = rng.choice(runtimes)
            edits.append((runtime.name, time.time()))
            runtime.edit_as_user("Kyma", "default", toggle, "kyma-system")
            next_edit = now + args.edit_every
        takeover_watch = watch_takeover(takeover_watch, takeovers, started)
        if now >= next_kill and now >= calm_until and takeover_watch is None:
            victim = rng.choice(list(fleet.procs))
            leading = fleet.leading_beat() == victim
            other = "beat-2" if victim == "beat-1" else "beat-1"
            if leading and not fleet.standing_by(other):
                victim = rng.choice([name for name in fleet.procs if not name.startswith("beat")])
                leading = False
            term = lease.term if leading and (lease := lease_current(LEASE_NAME)) else 0
            fleet.kill(victim)
            killed_at.append((victim, time.time()))
            if leading:
                takeover_watch = (time.monotonic(), term)
            fleet.start(victim)
            kills.append(victim)
            print(
                f"  {now - started:6.1f} s: killed {victim}{' (the leading beat)' if leading else ''}",
                flush=True,
            )
            next_kill = now + args.kill_every
        time.sleep(0.02)
    duration = time.monotonic() - started
    print(f"chaos over after {duration:.0f} s: {len(kills)} kills, {len(edits)} edits; settling", flush=True)
    deadline = time.monotonic() + args.settle
    while time.monotonic() < deadline and takeover_watch is not None:
        takeover_watch = watch_takeover(takeover_watch, takeovers, started)
        time.sleep(0.05)
    while time.monotonic() < deadline and (
        converged(runtimes, kymas) < len(runtimes) or unreconciled(edits, kymas)
    ):
        time.sleep(0.2)
    records_written(list(kymas.values()), deadline)
    sweeps.stop.set()
    return {
        "duration": duration,
        "kills": kills,
        "killed_at": killed_at,
        "started": started_wall,
        "outages": outages,
        "edits": edits,
        "events": watcher_sent(host, kubelet),
        "runtimes": runtimes,
        "kymas": kymas,
        "converged": converged(runtimes, kymas),
        "differing": differing(runtimes, kymas),
        "takeovers": takeovers,
        "sweep_gap": sweeps.longest_gap(),
        "sweep_interval": float(os.environ.get("RECONCILE_SWEEP_INTERVAL", "2")),
    }


def slow_edit(result: dict, late: float, name: str, at: float) -> str:
    """Where a slow edit's time went: until the listener accepted its runtime's next event (the
    listener's records), then until its reconcile started; and which processes were killed
    meanwhile (from shortly before the edit)."""
    first = result["started"]
    received = (
        WatchEventRecord.objects.filter(
            kyma_id=result["kymas"][name], received_at__gte=dt.datetime.fromtimestamp(at, dt.UTC)
        )
        .order_by("received_at")
        .values_list("received_at", flat=True)
        .first()
    )
    delivered = f"event accepted after {received.timestamp() - at:.1f} s" if received else "no event recorded"
    killed = [
        f"{who} at {when - at:+.1f} s" for who, when in result["killed_at"] if at - 5 <= when <= at + late
    ]
    return (
        f"{name} edited at {at - first:.1f} s: {late:.1f} s ({delivered}; killed: {', '.join(killed) or '-'})"
    )


def report(result: dict) -> None:
    kymas, edits = result["kymas"], result["edits"]
    starts: dict[int, list[float]] = {}
    for kyma_id, started in ReconcileRecord.objects.filter(kyma_id__in=kymas.values()).values_list(
        "kyma_id", "started_at"
    ):
        starts.setdefault(kyma_id, []).append(started.timestamp())
    for values in starts.values():
        values.sort()

    def first_after(name: str, moment: float) -> float | None:
        return next((s for s in starts.get(kymas[name], []) if s > moment), None)

    def waited(at: float, start: float) -> float:
        """From the edit to its reconcile's start, less the time the broker was away meanwhile
        (nothing can be queued then)."""
        away = sum(max(0.0, min(start, back) - max(at, down)) for down, back in result["outages"])
        return start - at - away

    lost = [(name, at) for name, at in edits if first_after(name, at) is None]
    # (how long, which runtime, when edited) for every edit that was reconciled
    timed = [
        (waited(at, start), name, at) for name, at in edits if (start := first_after(name, at)) is not None
    ]
    latencies = [late for late, _, _ in timed]
    after_broker, slowest = [], []
    for down, back in result["outages"]:
        for name, at in edits:
            if down <= at <= back + 10:
                reconciled = first_after(name, at)
                if reconciled is not None:
                    after_broker.append(reconciled - max(at, back))
                    slowest.append((reconciled - max(at, back), name, at - back))
    takeovers = result["takeovers"]
    takeover_p99 = percentile(takeovers, 99) if takeovers else 0.0
    after_p99 = percentile(after_broker, 99) if after_broker else 0.0
    n = len(result["runtimes"])
    print(
        f"\nkills by role: {dict(sorted((r, sum(k.startswith(r) for k in result['kills'])) for r in ROLES))}"
    )
    print(
        f"leading beat killed {len(takeovers)} time(s); takeovers (s): "
        + (", ".join(f"{t:.1f}" for t in takeovers) or "-")
        + f"; longest gap between two sweeps {result['sweep_gap']:.1f} s "
        f"(interval {result['sweep_interval']:g} s)"
    )
    if latencies:
        print(
            f"every edit -> its reconcile's start, less the time the broker was away meanwhile, "
            f"the whole run: p50 {statistics.median(latencies):.1f} s, "
            f"p99 {percentile(latencies, 99):.1f} s, max {max(latencies):.1f} s"
        )
    slow = sorted(timed, reverse=True)
    if slow and slow[0][0] > 20:
        print(
            "edits reconciled more than 20 s after: "
            + "; ".join(slow_edit(result, *e) for e in slow[:8] if e[0] > 20)
        )
    if after_broker:
        print(
            f"edits during or just after the {len(result['outages'])} outage(s) ("
            + ", ".join(f"{back - down:.0f}" for down, back in result["outages"])
            + f" s from stopping to answering again): {len(after_broker)}; "
            f"broker back -> reconcile p50 {statistics.median(after_broker):.1f} s, p99 {after_p99:.1f} s; "
            "slowest: "
            + ", ".join(
                f"{name} edited at back{edited:+.1f} s: {late:.1f} s"
                for late, name, edited in sorted(slowest)[-3:]
            )
        )
    for line in result["differing"][:10]:
        name = line.partition(":")[0]
        last = [at for edited, at in edits if edited == name][-3:]
        after = [s for s in starts.get(kymas[name], []) if last and s > last[0] - 30]
        print(
            f"not converged: {line}; its last edits at "
            + ", ".join(f"{dt.datetime.fromtimestamp(at, dt.UTC):%H:%M:%S.%f}"[:-3] for at in last)
            + ", reconciles started at "
            + ", ".join(f"{dt.datetime.fromtimestamp(at, dt.UTC):%H:%M:%S.%f}"[:-3] for at in after)
        )
    for name, at in lost[:10]:
        print(
            f"lost: the edit of {name} at {dt.datetime.fromtimestamp(at, dt.UTC):%H:%M:%S.%f} "
            "was never reconciled"
        )
    sweeps_kept = result["sweep_gap"] <= max(takeovers, default=0) + result["sweep_interval"] + 1
    edit_p99 = percentile(latencies, 99) if latencies else 0.0
    edit_max = max(latencies, default=0.0)
    print(
        f"goals: lost 0 ({'yes' if not lost else 'NO'}), "
        f"converged all ({'yes' if result['converged'] == n else 'NO'}), "
        f"takeover p99 <= 15 s ({'yes' if takeover_p99 <= 15 else 'NO'}), after broker p99 <= 10 s "
        f"({'yes' if after_p99 <= 10 else 'NO'}), no sweep missed longer than a takeover "
        f"({'yes' if sweeps_kept else 'NO'}), edit -> reconcile max <= 20 s "
        f"({'yes' if edit_max <= 20 else 'NO'})"
    )
    print(
        f"chaos: duration_s={result['duration']:.0f} kills={len(result['kills'])} "
        f"broker_outages={len(result['outages'])} events={result['events']} lost={len(lost)} "
        f"converged={result['converged']}/{n} beat_takeover_p99_s={takeover_p99:.1f} "
        f"after_broker_p99_s={after_p99:.1f} edit_reconcile_p99_s={edit_p99:.1f} "
        f"edit_reconcile_max_s={edit_max:.1f}"
    )


if __name__ == "__main__":
    main()
