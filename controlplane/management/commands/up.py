"""``manage.py up``: every role of the control plane in the foreground (what ``make run`` starts).

Each role runs as its own process with its output prefixed by its name; Ctrl-C (or any role
exiting) stops them all. This is for one machine; production runs each role on its own (README).
"""

from __future__ import annotations

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
            [*celery, "worker", "--loglevel", "INFO", "--concurrency", str(settings.DEV_WORKER_CONCURRENCY)],
        ),
        ("beat", [*celery, "beat", "--loglevel", "INFO"]),
    ]
    if demo:
        found.append(("runtimes", [*manage, "demo"]))
    return found


class Supervisor:
    """Starts the role processes, prefixes their output, and stops all of them together."""

    def __init__(self, commands: list[tuple[str, list[str]]], out: Any) -> None:
        self.commands = commands
        self.out = out
        self.procs: dict[str, subprocess.Popen] = {}
        self.lock = threading.Lock()
        self.width = max(len(name) for name, _ in commands)

    def _pump(self, name: str, colour: str, stream: Any) -> None:
        prefix = (
            f"{colour}{name.ljust(self.width)} |{RESET} "
            if self.out.isatty()
            else f"{name.ljust(self.width)} | "
        )
        for line in iter(stream.readline, ""):
            with self.lock:
                self.out.write(prefix + line)
                self.out.flush()

    def start(self) -> None:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        for index, (name, argv) in enumerate(self.commands):
            proc = subprocess.Popen(
                argv,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                env=env,
                start_new_session=True,
            )
            self.procs[name] = proc
            threading.Thread(
                target=self._pump, args=(name, COLOURS[index % len(COLOURS)], proc.stdout), daemon=True
            ).start()

    def wait(self) -> str | None:
        """Block until one role exits; returns its name (None on Ctrl-C)."""
        try:
            while True:
                for name, proc in self.procs.items():
                    if proc.poll() is not None:
                        return name
                time.sleep(0.3)
        except KeyboardInterrupt:
            return None

    def stop(self, timeout: float = 10) -> None:
        """SIGTERM each role's main process (it stops its own children); SIGKILL stragglers."""
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        deadline = time.monotonic() + timeout
        for proc in self.procs.values():
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)


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
        commands = roles(demo=demo)
        supervisor = Supervisor(commands, self.stdout._out)
        signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
        self.stdout.write(self.style.SUCCESS("Starting the control plane:"))
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
        exited = supervisor.wait()
        if exited:
            self.stderr.write(
                f"role {exited!r} exited (code {supervisor.procs[exited].returncode}); stopping all"
            )
        else:
            self.stdout.write("\nStopping...")
        supervisor.stop()
        if exited:
            sys.exit(1)
