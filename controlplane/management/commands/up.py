"""``manage.py up``: every role of the control plane in the foreground (what ``make run`` starts).

Each role runs as its own process with its output prefixed by its name, all in one process group
that ``up`` owns: Ctrl-C, SIGTERM or SIGHUP (or any role exiting) stops them all, and they die with
``up`` even if it is killed. One ``up`` per state directory, and busy ports are named before
anything starts (``controlplane.ownership``). This is for one machine; production runs each role on
its own (docs/operators/index.md).

Any role may run more than once (``--replicas N`` for all four, ``--scale ROLE=N`` for one), as in
production: the n-th web and listener replica listen on the configured port plus n - 1 (the
listener's metrics port too), workers get node names of their own, and beats elect a leader
(``controlplane.beat``). Output lines are prefixed ``web-1``, ``web-2``, ...
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Any

from django.apps import apps
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from controlplane.management.commands.demo import MISSING
from controlplane.ownership import (
    AlreadyRunning,
    InstanceLock,
    Watchdog,
    bind_problems,
    die_with_parent,
)
from kernel.adminpassword import admin_password_reminder

COLOURS = ["\033[36m", "\033[35m", "\033[33m", "\033[32m", "\033[34m", "\033[31m"]
RESET = "\033[0m"


REPLICATED = ("web", "listener", "worker", "beat")


def shifted(bind: str, by: int) -> str:
    """``HOST:PORT`` with the port ``by`` higher (the address of a further replica)."""
    host, _, port = bind.rpartition(":")
    return f"{host}:{int(port) + by}"


def parse_scale(values: list[str], replicas: int) -> dict[str, int]:
    """``--replicas N`` for every replicated role, then ``--scale ROLE=N`` for one."""
    if replicas < 1:
        raise CommandError("--replicas must be at least 1")
    scale = dict.fromkeys(REPLICATED, replicas)
    for value in values:
        role, sep, count = value.partition("=")
        if not sep or role not in REPLICATED or not count.isdigit() or int(count) < 1:
            raise CommandError(
                f"--scale takes ROLE=N with ROLE one of {', '.join(REPLICATED)} and N >= 1, got {value!r}"
            )
        scale[role] = int(count)
    return scale


Role = tuple[str, list[str], dict[str, str]]


def roles(*, demo: bool, scale: dict[str, int] | None = None) -> list[Role]:
    """(name, argv, environment overrides) of every process ``up`` starts."""
    scale = {**dict.fromkeys(REPLICATED, 1), **(scale or {})}
    python = sys.executable
    manage = [python, str(settings.BASE_DIR / "manage.py")]
    celery = [python, "-m", "celery", "-A", "controlplane"]
    found: list[Role] = []

    def replicas(role: str) -> list[tuple[str, int]]:
        count = scale[role]
        return [(role if count == 1 else f"{role}-{n + 1}", n) for n in range(count)]

    for name, n in replicas("web"):
        found.append((name, [*manage, "serve", "web", "--bind", shifted(settings.WEB_BIND, n)], {}))
    for name, n in replicas("listener"):
        bind = shifted(settings.LISTENER_BIND, n)
        metrics = shifted(settings.LISTENER_METRICS_BIND, n)
        found.append(
            (name, [*manage, "serve", "listener", "--bind", bind], {"LISTENER_METRICS_BIND": metrics})
        )
    worker = [
        *celery,
        "worker",
        "--loglevel",
        "INFO",
        "--pool",
        settings.CELERY_WORKER_POOL,
        "--concurrency",
        str(settings.CELERY_WORKER_CONCURRENCY),
    ]
    for name, _ in replicas("worker"):
        found.append((name, [*worker, "-n", f"{name}@%h"] if scale["worker"] > 1 else worker, {}))
    for name, _ in replicas("beat"):
        found.append((name, [*celery, "beat", "--loglevel", "INFO"], {}))
    if demo:
        found.append(("runtimes", [*manage, "demo"], {}))
        found.append(("manager", [*manage, "demo_manager"], {}))  # the SDK's example keda manager
    return found


def binds(commands: list[Role]) -> dict[str, str]:
    """Every address the processes will listen on, by a name for people."""
    found = {}
    for name, argv, env in commands:
        of = "" if name in REPLICATED else f" of {name}"
        if "--bind" in argv:
            setting = "LISTENER_BIND" if "listener" in argv else "WEB_BIND"
            found[f"{setting}{of}"] = argv[argv.index("--bind") + 1]
        if "LISTENER_METRICS_BIND" in env:
            found[f"LISTENER_METRICS_BIND{of}"] = env["LISTENER_METRICS_BIND"]
    return found


class Supervisor:
    """Starts the role processes, prefixes their output, and stops all of them together."""

    def __init__(self, commands: list[tuple[str, list[str]]] | list[Role], out: Any) -> None:
        self.commands = [
            (command[0], command[1], command[2] if len(command) > 2 else {}) for command in commands
        ]
        self.out = out
        self.procs: dict[str, subprocess.Popen] = {}
        self.lock = threading.Lock()
        self.width = max(len(name) for name, _, _ in self.commands)
        self.pgid = 0
        self.watchdog: Watchdog | None = None

    def _pump(self, name: str, colour: str, stream: Any) -> None:
        prefix = (
            f"{colour}{name.ljust(self.width)} |{RESET} "
            if self.out.isatty()
            else f"{name.ljust(self.width)} | "
        )
        for line in iter(stream.readline, ""):
            with self.lock:
                try:
                    self.out.write(prefix + line)
                    self.out.flush()
                except OSError:  # the terminal is gone (SIGHUP): keep draining so no role blocks
                    pass

    def start(self) -> None:
        """Start every role in one new process group (its own, so a terminal's Ctrl-C reaches
        ``up`` alone and ``up`` decides how everything stops); each role dies with ``up``."""
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        preexec = die_with_parent()
        for name, argv, overrides in self.commands:
            self.procs[name] = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                env={**env, **overrides},
                process_group=self.pgid or 0,
                preexec_fn=preexec,
            )
            self.pgid = self.pgid or self.procs[name].pid
        self.watchdog = Watchdog(self.pgid)
        # The output threads start after every fork: a preexec_fn and running threads do not mix.
        for index, (name, proc) in enumerate(self.procs.items()):
            threading.Thread(
                target=self._pump, args=(name, COLOURS[index % len(COLOURS)], proc.stdout), daemon=True
            ).start()

    def wait(self, stopping: threading.Event) -> str | None:
        """Block until one role exits (returns its name) or ``stopping`` is set (returns None)."""
        while not stopping.is_set():
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    return name
            stopping.wait(0.3)
        return None

    def stop(self, timeout: float = 10) -> None:
        """SIGTERM the roles' group (each role stops its own children), wait, then SIGKILL
        whatever is left in the group, so nothing outlives ``up``."""
        self._signal_group(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for proc in self.procs.values():
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                break
        self._signal_group(signal.SIGKILL)
        for proc in self.procs.values():
            proc.wait()
        if self.watchdog is not None:
            self.watchdog.release()

    def _signal_group(self, sig: int) -> None:
        if self.pgid:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pgid, sig)


def remind_when_serving(supervisor: Supervisor, text: str, timeout: float = 60) -> None:
    """Print ``text`` once the web role accepts connections (the end of start-up), below the
    roles' banners rather than among them; after ``timeout`` seconds, print it anyway."""
    host, _, port = settings.WEB_BIND.rpartition(":")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection((host or "127.0.0.1", int(port)), timeout=0.5).close()
            break
        except OSError:
            time.sleep(0.2)
    with supervisor.lock:
        supervisor.out.write(text + "\n")
        supervisor.out.flush()


class Command(BaseCommand):
    help = "Run web, listener, worker and beat (and simulated runtimes) together in the foreground."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--no-demo", action="store_true", help="do not start simulated runtimes")
        parser.add_argument(
            "--replicas",
            type=int,
            default=1,
            help="run web, listener, worker and beat this many times each (ports counted up from "
            "WEB_BIND, LISTENER_BIND, LISTENER_METRICS_BIND; the beats elect one)",
        )
        parser.add_argument(
            "--scale",
            action="append",
            default=[],
            metavar="ROLE=N",
            help="run one role N times (after --replicas), e.g. --scale worker=3",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        demo = not options["no_demo"]
        scale = parse_scale(options["scale"], options["replicas"])
        if demo and not apps.is_installed("demo"):
            raise CommandError(f"{MISSING}; or start without them: manage.py up --no-demo")
        urls = {
            "admin": f"{settings.PUBLIC_URL}/admin/",
            "listener": f"https://{settings.LISTENER_BIND}",
        }
        self.lock = InstanceLock(settings.STATE_DIR / "up.lock")
        try:
            self.lock.acquire(urls)
        except AlreadyRunning as running:
            held = running.details
            raise CommandError(
                f"manage.py up already runs for {settings.STATE_DIR} (PID {held.get('pid', '?')}; "
                f"admin {held.get('admin', '?')}, listener {held.get('listener', '?')}): "
                "stop it first, or give this one another CONTROLPLANE_STATE_DIR"
            ) from None
        commands = roles(demo=demo, scale=scale)
        busy = bind_problems(binds(commands))
        if busy:
            raise CommandError(
                f"cannot listen on {'; '.join(busy)}: stop what uses it or set another address"
            )
        stopping = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            # Set explicitly: under nohup or a script's `&` SIGINT arrives ignored.
            signal.signal(sig, lambda *_: stopping.set())
        supervisor = Supervisor(commands, self.stdout._out)
        exited = None
        try:
            self.stdout.write(self.style.SUCCESS(f"Starting the control plane (PID {os.getpid()}):"))
            self.stdout.write(f"  admin      {settings.PUBLIC_URL}/admin/")
            for name, argv, _ in commands[1 : scale["web"]]:
                self.stdout.write(f"             http://{argv[argv.index('--bind') + 1]}/admin/  ({name})")
            self.stdout.write(
                f"  API        {settings.PUBLIC_URL}/api/v1/   (docs: {settings.PUBLIC_URL}/api/docs/)"
            )
            self.stdout.write(
                f"  health     {settings.PUBLIC_URL}/readyz   metrics: {settings.PUBLIC_URL}/metrics"
            )
            listeners = [command for command in commands if command[0].startswith("listener")]
            for name, argv, env in listeners:
                self.stdout.write(
                    f"  {'listener' if name == listeners[0][0] else ' ' * 8}   "
                    f"https://{argv[argv.index('--bind') + 1]}/v2/<component>/event  (mutual TLS; "
                    f"metrics http://{env['LISTENER_METRICS_BIND']}/metrics)"
                    + (f"  ({name})" if len(listeners) > 1 else "")
                )
            if scale != dict.fromkeys(REPLICATED, 1):
                self.stdout.write(
                    "  replicas   "
                    + ", ".join(f"{role} x{scale[role]}" for role in REPLICATED)
                    + " (the beats elect one)"
                )
            self.stdout.write("Press Ctrl-C to stop everything.\n")
            supervisor.start()
            reminder = admin_password_reminder()
            if reminder:
                threading.Thread(target=remind_when_serving, args=(supervisor, reminder), daemon=True).start()
            exited = supervisor.wait(stopping)
            if exited:
                self.stderr.write(
                    f"role {exited!r} exited (code {supervisor.procs[exited].returncode}); stopping all"
                )
            else:
                self.stdout.write("\nStopping...")
        except OSError:  # the terminal went away while writing: still stop every role
            pass
        finally:
            supervisor.stop()
        if exited:
            sys.exit(1)
