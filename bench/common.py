"""Shared set-up of the benchmarks: Django on a database of their own, processes, timing, printing.

Benchmarks use ``.state/bench`` (SQLite) unless ``BENCH_DATABASE_URL`` names another database;
they delete and re-create the objects they need there, so never point it at real data.

Processes: a benchmark starts its servers and workers with :func:`spawn` (each in a session of
its own) and stops them with :func:`stop_processes`, which never raises and ends with SIGKILL
whatever did not stop in time. Whatever happens (the benchmark fails, is interrupted with
Ctrl-C, gets SIGTERM or SIGHUP), on the way out every process it started is stopped: those
:func:`spawn` started, and every other process carrying this run's ``CONTROLPLANE_BENCH_RUN``
mark in its environment (children of children, in sessions of their own). The smoke test
(``tests/bench/test_smoke.py``) runs each benchmark with ``--smoke`` and looks for that mark
afterwards: a benchmark that leaves a process behind fails there.

``--smoke`` (:func:`parse_args`): every benchmark runs in seconds with tiny sizes, to show that
it still works and prints its closing line; its figures mean nothing.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import os
import secrets
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
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cryptography.fernet import Fernet

ROOT = Path(__file__).resolve().parent.parent
# Every process of one benchmark run carries this mark in its environment (inherited).
RUN_MARK = "CONTROLPLANE_BENCH_RUN"
_started: list[subprocess.Popen] = []


def _exit_on_signal(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def parse_args(parser: argparse.ArgumentParser, *, smoke: dict[str, Any]) -> argparse.Namespace:
    """Parse the command line; with ``--smoke``, the options in ``smoke`` take those tiny values
    (whatever else was given): the run takes seconds and only shows the benchmark still works."""
    parser.add_argument(
        "--smoke", action="store_true", help="tiny sizes: finishes in seconds, prints its closing line"
    )
    args = parser.parse_args()
    if args.smoke:
        for name, value in smoke.items():
            setattr(args, name, value)
    return args


def spawn(
    argv: list[str], *, env: dict | None = None, cwd: Path | str = ROOT, **popen: Any
) -> subprocess.Popen:
    """Start a process in a session of its own (its group is stopped whole), remembered so that it
    is stopped when the benchmark ends, however it ends: even killed with SIGKILL, when nothing of
    it runs any more, the process gets SIGTERM from the kernel (Linux, ``PR_SET_PDEATHSIG``; only
    from the main thread, since the signal follows the forking thread's end) and stops its own."""
    if sys.platform == "linux" and threading.current_thread() is threading.main_thread():
        from runtime_emulator.kubelet import DIE_WITH_PARENT

        program = shutil.which(argv[0]) or argv[0]
        argv = [sys.executable, "-c", DIE_WITH_PARENT, str(os.getpid()), program, *argv[1:]]
    proc = subprocess.Popen(argv, cwd=cwd, env=env, start_new_session=True, **popen)
    _started.append(proc)
    return proc


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


def stop_begin(procs: list[subprocess.Popen]) -> None:
    """SIGTERM each process now and go on (:func:`stop_processes` waits for them later, without
    signalling them again): a Celery worker takes seconds to stop, which other work can use."""
    for proc in procs:
        if proc.poll() is None and proc not in _terminated:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            _terminated.add(proc)


_terminated: set[subprocess.Popen] = set()


def stop_processes(procs: list[subprocess.Popen], timeout: float = 20) -> None:
    """SIGTERM each process (as Kubernetes does: the process stops its own children; a prefork
    worker whose pool processes got the signal too hung in its warm shutdown), wait up to
    ``timeout`` seconds for all of them, then SIGKILL their groups (what did not stop, and
    children left behind by a parent that did). Never raises."""
    stop_begin(procs)
    deadline = time.monotonic() + timeout
    _wake_workers([proc for proc in procs if proc in _workers], deadline)
    for proc in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(max(0.0, deadline - time.monotonic()))
    for proc in procs:
        _signal_group(proc, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(5)
        if proc in _started:
            _started.remove(proc)
        _terminated.discard(proc)
        _workers.pop(proc, None)


# Celery workers start_workers started: their node names.
_workers: dict[subprocess.Popen, str] = {}


def _wake_workers(procs: list[subprocess.Popen], deadline: float) -> None:
    """Until these stopping Celery workers are gone: pings to them. On a polling broker (the
    filesystem one) a worker sees its stop signal only once its wait for a message (2 s) ends,
    twice over (its loop waits once more before it goes): 2-4 s. A message ends the wait."""
    with contextlib.suppress(Exception):
        from controlplane.celery import app

        while time.monotonic() < deadline and (alive := [p for p in procs if p.poll() is None]):
            app.control.ping(destination=[_workers[p] for p in alive], timeout=0.2)


def marked_processes(mark: str) -> list[int]:
    """Processes (other than this one) whose environment carries ``RUN_MARK=mark``."""
    needle = f"{RUN_MARK}={mark}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0"):
            found.append(int(entry.name))
    return found


def _stop_everything() -> None:
    """On the way out: stop what :func:`spawn` started, then anything else of this run, then
    remove the run's scratch directories (:func:`scratch_dir`)."""
    stop_processes(list(_started), timeout=10)
    mark = os.environ.get(RUN_MARK)
    if mark and Path("/proc").is_dir():
        for pid in marked_processes(mark):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
    for directory in _scratch:
        shutil.rmtree(directory, ignore_errors=True)


_scratch: list[Path] = []


def scratch_dir(prefix: str) -> Path:
    """A new temporary directory for this run's files (certificates and their private keys, logs),
    removed on the way out, however the run ends (after its processes stopped). Its name carries
    the run's mark, so what a run left behind can be found."""
    directory = Path(tempfile.mkdtemp(prefix=f"{prefix}{os.environ.get(RUN_MARK, '')[:12]}-"))
    _scratch.append(directory)
    return directory


def setup_django(name: str, *, static: bool = False) -> None:
    """Django on the benchmark's database, migrated; ``static``: the static files collected too,
    for a benchmark that renders pages (production's manifest storage names every file a
    template uses, and fails on a file it lacks). The others skip it: it takes seconds."""
    # A benchmark stopped with SIGTERM (kill, timeout) or SIGHUP still runs its ``finally`` blocks
    # and the exit handler below, which stop the servers and workers it started in sessions of
    # their own; left running, they kept taking tasks from the bench's broker database and CPU
    # from the next run.
    signal.signal(signal.SIGTERM, _exit_on_signal)
    signal.signal(signal.SIGHUP, _exit_on_signal)
    os.environ.setdefault(RUN_MARK, uuid.uuid4().hex)
    atexit.register(_stop_everything)
    # The project's packages come first, and bench/ (the script's directory) goes: bench/fleet.py
    # would otherwise shadow the fleet app.
    here = Path(__file__).resolve().parent
    sys.path[:] = [str(ROOT), *(p for p in sys.path if p and Path(p).resolve() != here)]
    os.environ.setdefault("CONTROLPLANE_STATE_DIR", str(ROOT / ".state" / f"bench-{name}"))
    os.environ["DJANGO_SETTINGS_MODULE"] = "controlplane.settings"
    if os.environ.get("BENCH_DATABASE_URL"):
        os.environ["DATABASE_URL"] = os.environ["BENCH_DATABASE_URL"]
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    # Production mode (no debug query log, manifest-free static storage is fine for timing).
    os.environ.setdefault("DJANGO_DEBUG", "0")
    # Keys kept with the bench state: the bench database outlives one run.
    keys = ROOT / ".state" / "bench-keys"  # one set for every benchmark: they may share a database
    if not keys.exists():
        keys.parent.mkdir(parents=True, exist_ok=True)
        keys.write_text(f"{secrets.token_urlsafe(60)}\n{Fernet.generate_key().decode()}\n")
    secret_key, encryption_key = keys.read_text().split()
    os.environ.setdefault("DJANGO_SECRET_KEY", secret_key)
    os.environ.setdefault("CONTROLPLANE_ENCRYPTION_KEYS", encryption_key)
    os.environ.setdefault("DJANGO_ALLOWED_HOSTS", "testserver,localhost,127.0.0.1")
    os.environ.setdefault("DJANGO_SECURE_SSL_REDIRECT", "0")
    import django

    django.setup()
    from django.core.management import call_command

    fresh = _sqlite_fresh()
    if fresh is not None:
        _sqlite_from_template(fresh)
    call_command("migrate", verbosity=0)  # (a database made from the template: nothing to do)
    if fresh is not None:
        _sqlite_template_keep(fresh)
    if static:
        call_command("collectstatic", interactive=False, verbosity=0)


# Fresh SQLite databases (a smoke's, in a new state directory) start as a copy of one migrated
# before, kept per set of migrations: migrating from nothing took 1.7 s of every smoke.
SQLITE_TEMPLATES = ROOT / ".state" / "bench-sqlite"


def _sqlite_fresh() -> Path | None:
    """The template a new SQLite database starts from (its path names every migration's text);
    None when the database is not SQLite or exists already (it is migrated as it is)."""
    import hashlib

    import django
    from django.apps import apps
    from django.db import connection

    if connection.vendor != "sqlite" or Path(connection.settings_dict["NAME"]).exists():
        return None
    digest = hashlib.sha256(str(django.VERSION).encode())
    for app in sorted(apps.get_app_configs(), key=lambda app: app.label):
        for path in sorted((Path(app.path) / "migrations").glob("*.py")):
            digest.update(f"{app.label}/{path.name}\0".encode() + path.read_bytes())
    return SQLITE_TEMPLATES / f"{digest.hexdigest()[:24]}.sqlite3"


def _sqlite_copy(source: Path, target: Path) -> None:
    """SQLite's online backup: a consistent copy whatever its journal holds."""
    import sqlite3

    with (
        contextlib.closing(sqlite3.connect(source)) as src,
        contextlib.closing(sqlite3.connect(target)) as dst,
    ):
        src.backup(dst)


def _sqlite_from_template(template: Path) -> None:
    from django.db import connection

    if template.exists():
        connection.close()
        _sqlite_copy(template, Path(connection.settings_dict["NAME"]))


def _sqlite_template_keep(template: Path) -> None:
    """After the first migration of a set: the database, as migrated, becomes its template
    (written aside and renamed: benchmarks that run side by side may both write it), and the
    templates of other sets go."""
    from django.db import connection

    if template.exists():
        return
    template.parent.mkdir(parents=True, exist_ok=True)
    part = template.with_name(f"{template.name}.{os.getpid()}")
    connection.close()
    _sqlite_copy(Path(connection.settings_dict["NAME"]), part)
    part.replace(template)
    for other in SQLITE_TEMPLATES.glob("*.sqlite3"):
        if other != template:
            other.unlink(missing_ok=True)


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(pct / 100 * (len(ordered) - 1))))
    return ordered[index]


def timed(fn: Callable[[], object], repeat: int, warmup: int = 3) -> list[float]:
    """Wall-clock milliseconds of ``repeat`` calls after ``warmup`` calls."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def summary(samples: list[float]) -> str:
    return f"median {statistics.median(samples):7.2f} ms   p95 {percentile(samples, 95):7.2f} ms"


def measure_page(client: object, path: str, repeat: int, **headers: str) -> tuple[list[float], int]:
    """Server time samples (ms) of GET ``path`` with a Django test client, and its SQL query count."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    def fetch() -> None:
        response = client.get(path, **headers)
        assert response.status_code == 200, (path, response.status_code)

    samples = timed(fetch, repeat)
    with CaptureQueriesContext(connection) as queries:
        fetch()
    return samples, len(queries)


def klm_watcher(**extra: object) -> None:
    """The lifecycle-manager Watcher every runtime gets (its events reconcile the Kyma)."""
    from watchers.models import Watcher

    Watcher.objects.create(
        namespace="kcp-system",
        name="klm-watcher",
        manager="lifecycle-manager",
        component="lifecycle-manager",
        labels_to_watch={"operator.kyma-project.io/watched-by": "kyma"},
        resource_to_watch={"group": "operator.kyma-project.io", "version": "*", "resource": "kymas"},
        service_info={"name": "klm", "namespace": "kcp-system", "port": 8082},
        **extra,
    )


# A Kyma's entry for keda, the module of :func:`keda_module`.
KEDA_IN_KYMA = {"name": "keda", "customResourcePolicy": "CreateAndDelete", "managed": True}


def clear_fleet() -> None:
    """No Kymas (nor their certificates) and no Watchers: what every fleet benchmark starts from."""
    from fleet.models import Kyma
    from pki.models import Certificate
    from watchers.models import Watcher

    Certificate.objects.filter(kyma__isnull=False).delete()
    Kyma.objects.all().delete()
    Watcher.objects.all().delete()


def keda_module(name: str = "keda") -> Any:
    """A module whose CR is a ``Keda`` (operator.kyma-project.io/v1alpha1), channel regular 1.0.0."""
    from fleet.models import Module

    return Module.objects.create(
        name=name,
        channels={"regular": "1.0.0"},
        cr_group="operator.kyma-project.io",
        cr_version="v1alpha1",
        cr_kind="Keda",
        cr_plural="kedas",
        default_cr={"spec": {"replicas": 1}},
    )


def register_kymas(
    runtimes: list,
    names: list[str],
    *,
    modules: list[dict[str, Any]] | None = None,
    uid: Callable[[str], uuid.UUID] | None = None,
    heard: bool = False,
) -> list:
    """One Kyma per emulated runtime (its kubeconfig sealed), named ``names`` in order, each with
    its certificate (issued in bulk); ``heard``: as if its watcher had just reported."""
    from django.utils import timezone

    from fleet.models import Kyma, WatcherContact
    from kernel.documents.yamlio import dump_yaml
    from kernel.sealing import Sealed
    from pki import services as pki

    now = timezone.now() if heard else None
    Kyma.objects.bulk_create(
        [
            Kyma(
                uid=uid(name) if uid else uuid.uuid4(),
                namespace="kcp-system",
                name=name,
                runtime_id=f"rt-{name}",
                skr_domain=f"{name}.kyma.example.com",
                modules=modules or [],
                kubeconfig=Sealed.seal(dump_yaml([runtime.kubeconfig()])),
            )
            for name, runtime in zip(names, runtimes, strict=True)
        ],
        batch_size=1000,
    )
    order = {name: n for n, name in enumerate(names)}
    kymas = sorted((k for k in Kyma.objects.all() if k.name in order), key=lambda k: order[k.name])
    if heard:
        WatcherContact.objects.bulk_create(
            [WatcherContact(kyma_id=k.pk, last_seen_at=now) for k in kymas], batch_size=1000
        )
    pki.certificates_issue_bulk(kymas=kymas)
    return kymas


def converge(
    ids: list[int], done: Callable[[], bool], missing: Callable[[], str], timeout: float = 180
) -> None:
    """Until ``done()``: looks every 0.1 s and asks for a reconcile of ``ids`` once a second (a
    reconcile that found a runtime not ready yet is asked again, as an operator would); after
    ``timeout`` seconds, ``TimeoutError`` naming ``missing()``."""
    from fleet import queue

    deadline, asked = time.monotonic() + timeout, 0.0
    while time.monotonic() < deadline:
        if done():
            return
        if time.monotonic() >= asked + 1:
            queue.request(ids, reason="bench: converge")
            asked = time.monotonic()
        time.sleep(0.1)
    raise TimeoutError(f"not converged: {missing()}")


def database_label() -> str:
    from django.db import connection

    return f"{connection.vendor} ({connection.settings_dict['NAME']})"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_port(port: int, proc: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            said = proc.stderr.read().decode(errors="replace")[-3000:] if proc.stderr else ""
            raise RuntimeError(f"server exited with {proc.returncode}:\n{said}")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise TimeoutError(f"port {port} not open")


def wait_tls(port: int, proc: subprocess.Popen, timeout: float = 60) -> None:
    """Until a worker of this TLS server answers a handshake (a gunicorn master listens, and the
    kernel queues connections, long before its worker has loaded the app); refusing a client
    without a certificate is an answer too. Raises when the server exits first."""
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        wait_port(port, proc, max(0.0, deadline - time.monotonic()))
        try:
            with (
                socket.create_connection(("127.0.0.1", port), timeout=1) as raw,
                context.wrap_socket(raw, server_hostname="localhost"),
            ):
                return
        except ssl.SSLError:
            return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(f"no TLS handshake on port {port} after {timeout:.0f} s")


def start_listener(port: int, env: dict) -> subprocess.Popen:
    argv = [sys.executable, str(ROOT / "manage.py"), "serve", "listener", "--bind", f"127.0.0.1:{port}"]
    return spawn(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def start_workers(
    count: int,
    *,
    pool: str | None = None,
    concurrency: int | None = None,
    name: str = "bench",
    **env: str,
) -> list[subprocess.Popen]:
    """``count`` Celery worker processes (``concurrency`` pool slots each), in their own sessions,
    named ``<name><number>@<host>`` (workers still stopping answer to their own names only).
    Without ``pool``/``concurrency``: the production defaults (``WORKER_POOL``,
    ``WORKER_CONCURRENCY``)."""
    from django.conf import settings

    pool = pool or settings.CELERY_WORKER_POOL
    concurrency = concurrency or settings.CELERY_WORKER_CONCURRENCY
    procs = []
    for number in range(count):
        argv = [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "controlplane",
            "worker",
            "--pool",
            pool,
            "--concurrency",
            str(concurrency),
            "--loglevel",
            "WARNING",
            "--without-mingle",
            "--without-gossip",
            "--without-heartbeat",
            "-n",
            f"{name}{number}@%h",
        ]
        log = open(state_dir() / f"worker-{name}{number}.log", "w")  # noqa: SIM115 - the child's output
        procs.append(
            spawn(
                argv,
                # (Celery's CLI cannot tell an explicit --pool prefork from its default: the
                # WORKER_POOL setting decides)
                env={**os.environ, "WORKER_POOL": pool, **env},
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        )
        log.close()
    nodes = {f"{name}{number}@{socket.gethostname()}": proc for number, proc in enumerate(procs)}
    _workers.update({proc: node for node, proc in nodes.items()})
    wait_for_workers(
        {
            node: (proc, state_dir() / f"worker-{name}{number}.log")
            for number, (node, proc) in enumerate(nodes.items())
        }
    )
    return procs


def wait_for_workers(workers: dict[str, tuple[subprocess.Popen, Path]], timeout: float = 90) -> None:
    """Until every worker (node name: its process and log file) answers a ping, i.e. consumes; a
    worker that exits first raises, with the end of its log."""
    from controlplane.celery import app

    deadline, waiting = time.monotonic() + timeout, set(workers)
    while waiting and time.monotonic() < deadline:
        for proc, log in workers.values():
            if proc.poll() is not None:
                said = log.read_text(errors="replace")[-3000:] if log.is_file() else ""
                raise RuntimeError(f"a worker exited with {proc.returncode}:\n{said}")
        for answer in app.control.ping(destination=sorted(waiting), timeout=0.5):
            waiting -= set(answer)
    if waiting:
        raise TimeoutError(f"workers {sorted(waiting)} did not answer within {timeout:.0f} s")


def state_dir() -> Path:
    """This benchmark's state directory (its SQLite database, broker folder, process logs)."""
    path = Path(os.environ["CONTROLPLANE_STATE_DIR"])
    path.mkdir(parents=True, exist_ok=True)
    return path


def wait_for_line(path: Path, needle: str, proc: subprocess.Popen, timeout: float = 60) -> None:
    """Until ``needle`` appears in the process's log file (it started), or it exits (raises)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if needle in path.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args[:6]} exited with {proc.returncode}:\n{path.read_text()[-3000:]}")
        time.sleep(0.1)
    raise TimeoutError(f"{path.name}: no {needle!r} after {timeout:.0f} s")


class RawClient:
    """A lean HTTP/1.1 client over one TLS socket: the load generator must not eat the CPU the
    server needs (the same client drives all three modes, so the ratios stay fair)."""

    def __init__(self, port: int, context: ssl.SSLContext, request: bytes) -> None:
        self.port, self.context, self.request = port, context, request
        self.sock: ssl.SSLSocket | None = None
        self.buffer = b""

    def connect(self) -> None:
        raw = socket.create_connection(("127.0.0.1", self.port), timeout=30)
        self.sock = self.context.wrap_socket(raw, server_hostname="localhost")
        self.buffer = b""

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def post(self) -> int:
        if self.sock is None:
            self.connect()
        self.sock.sendall(self.request)
        while b"\r\n\r\n" not in self.buffer:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed")
            self.buffer += chunk
        head, _, rest = self.buffer.partition(b"\r\n\r\n")
        status = int(head[9:12])
        lowered = head.lower()
        length = (
            int(lowered.split(b"content-length:")[1].split(b"\r\n")[0])
            if b"content-length:" in lowered
            else 0
        )
        while len(rest) < length:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed")
            rest += chunk
        self.buffer = rest[length:]
        if b"connection: close" in lowered:
            self.close()
        return status


def _processes() -> dict[int, tuple[int, str, float]]:
    """pid -> (parent pid, command name, CPU seconds used) of every process now. A process's CPU
    includes that of its children it has waited for: a PostgreSQL backend that ended during the
    run leaves its CPU with the postmaster (counted without it, a role's CPU could shrink over a
    run, and a per-operation figure come out negative)."""
    tick = os.sysconf("SC_CLK_TCK")
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        name, rest = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :].split()
        # (utime, stime, cutime, cstime: proc(5))
        found[int(entry.name)] = (int(rest[1]), name, sum(int(field) for field in rest[11:15]) / tick)
    return found


def cpu_by_role(roots: dict[str, list[int]], by_name: dict[str, str] | None = None) -> dict[str, float]:
    """CPU seconds used so far by each role: its root processes and all their live descendants
    (``roots``), plus processes by command name (``by_name``: name -> role, e.g. postgres)."""
    table = _processes()
    children: dict[int, list[int]] = {}
    for pid, (parent, _, _) in table.items():
        children.setdefault(parent, []).append(pid)
    used = dict.fromkeys([*roots, *(by_name or {}).values()], 0.0)
    for role, pids in roots.items():
        todo = list(pids)
        while todo:
            pid = todo.pop()
            if pid in table:
                used[role] += table[pid][2]
                todo += children.get(pid, [])
    for _, name, seconds in table.values():
        if by_name and name in by_name:
            used[by_name[name]] += seconds
    return used
