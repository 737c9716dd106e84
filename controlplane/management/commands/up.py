"""``manage.py up``: every role of the control plane in the foreground (what ``make run`` starts).

Each role runs as its own process with its output prefixed by its name, all in one process group
that ``up`` owns: Ctrl-C, SIGTERM or SIGHUP (or any role exiting) stops them all, and they die with
``up`` even if it is killed. One ``up`` per state directory, and busy ports are named before
anything starts (``controlplane.ownership``). This is for one machine; production runs each role on
its own (README).
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


def roles(*, demo: bool) -> list[tuple[str, list[str]]]:
    python = sys.executable
    manage = [python, str(settings.BASE_DIR / "manage.py")]
    celery = [python, "-m", "celery", "-A", "controlplane"]
    found = [
        ("web", [*manage, "serve", "web"]),
        ("listener", [*manage, "serve", "listener"]),
        (
            "worker",
            [
                *celery,
                "worker",
                "--loglevel",
                "INFO",
                "--pool",
                settings.CELERY_WORKER_POOL,
                "--concurrency",
                str(settings.CELERY_WORKER_CONCURRENCY),
            ],
        ),
        ("beat", [*celery, "beat", "--loglevel", "INFO"]),
    ]
    if demo:
        found.append(("runtimes", [*manage, "demo"]))
        found.append(("manager", [*manage, "demo_manager"]))  # the SDK's example keda manager
    return found


class Supervisor:
    """Starts the role processes, prefixes their output, and stops all of them together."""

    def __init__(self, commands: list[tuple[str, list[str]]], out: Any) -> None:
        self.commands = commands
        self.out = out
        self.procs: dict[str, subprocess.Popen] = {}
        self.lock = threading.Lock()
        self.width = max(len(name) for name, _ in commands)
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
        for name, argv in self.commands:
            self.procs[name] = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                env=env,
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

    def handle(self, *args: Any, **options: Any) -> None:
        demo = not options["no_demo"]
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
        busy = bind_problems(
            {
                "WEB_BIND": settings.WEB_BIND,
                "LISTENER_BIND": settings.LISTENER_BIND,
                "LISTENER_METRICS_BIND": settings.LISTENER_METRICS_BIND,
            }
        )
        if busy:
            raise CommandError(
                f"cannot listen on {'; '.join(busy)}: stop what uses it or set another address"
            )
        stopping = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            # Set explicitly: under nohup or a script's `&` SIGINT arrives ignored.
            signal.signal(sig, lambda *_: stopping.set())
        commands = roles(demo=demo)
        supervisor = Supervisor(commands, self.stdout._out)
        exited = None
        try:
            self.stdout.write(self.style.SUCCESS(f"Starting the control plane (PID {os.getpid()}):"))
            self.stdout.write(f"  admin      {settings.PUBLIC_URL}/admin/")
            self.stdout.write(
                f"  API        {settings.PUBLIC_URL}/api/v1/   (docs: {settings.PUBLIC_URL}/api/docs/)"
            )
            self.stdout.write(
                f"  health     {settings.PUBLIC_URL}/readyz   metrics: {settings.PUBLIC_URL}/metrics"
            )
            self.stdout.write(
                f"  listener   https://{settings.LISTENER_BIND}/v2/<component>/event  (mutual TLS; "
                f"metrics http://{settings.LISTENER_METRICS_BIND}/metrics)"
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
