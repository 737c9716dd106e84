"""Real processes for integration tests: gunicorn roles and Celery workers on the test database."""

from __future__ import annotations

import collections
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from django.conf import settings
from django.db import connection

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def database_url() -> str:
    """URL of the database the tests use right now (pytest-django renames it)."""
    db = connection.settings_dict
    if db["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{db['NAME']}"
    auth = db["USER"] + (f":{db['PASSWORD']}" if db["PASSWORD"] else "")
    return f"postgres://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


def process_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        DJANGO_SETTINGS_MODULE="tests.settings",
        DATABASE_URL=database_url(),
        DATABASE_CONN_MAX_AGE="0",
        CONTROLPLANE_STATE_DIR=str(settings.STATE_DIR),
        PYTHONUNBUFFERED="1",
        WEB_ACCESS_LOG="0",
    )
    env.update(extra)
    return env


class Process:
    """A child process whose recent output is kept for failure messages."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], *, keep: int = 300) -> None:
        self.name = name
        self.lines: collections.deque[str] = collections.deque(maxlen=keep)
        self.proc = subprocess.Popen(
            argv,
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in iter(self.proc.stdout.readline, ""):
            self.lines.append(line.rstrip())

    def output(self) -> str:
        return "\n".join(self.lines)

    def wait_for(self, condition: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"{self.name} exited ({self.proc.returncode}) before {what}:\n{self.output()}"
                )
            if condition():
                return
            time.sleep(0.05)
        raise TimeoutError(f"{self.name}: {what} did not happen within {timeout}s:\n{self.output()}")

    def wait_for_line(self, needle: str, timeout: float = 30) -> None:
        self.wait_for(lambda: any(needle in line for line in list(self.lines)), timeout, f"output {needle!r}")

    def signal(self, sig: int) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)

    def stop(self, timeout: float = 15) -> int:
        self.signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.signal(signal.SIGKILL)
            return self.proc.wait(5)


def wait_port(port: int, timeout: float = 30, proc: Process | None = None) -> None:
    def open_() -> bool:
        with socket.socket() as sock:
            return sock.connect_ex(("127.0.0.1", port)) == 0

    if proc is not None:
        proc.wait_for(open_, timeout, f"port {port} open")
        return
    deadline = time.monotonic() + timeout
    while not open_():
        if time.monotonic() > deadline:
            raise TimeoutError(f"port {port} not open after {timeout}s")
        time.sleep(0.05)


def start_web(**env: str) -> tuple[Process, str]:
    port = free_port()
    proc = Process(
        "web",
        [sys.executable, "manage.py", "serve", "web", "--bind", f"127.0.0.1:{port}"],
        process_env(WEB_WORKERS="1", **env),
    )
    wait_port(port, proc=proc)
    return proc, f"http://127.0.0.1:{port}"


def start_worker(concurrency: int = 1, pool: str = "threads", **env: str) -> Process:
    """A Celery worker: ``concurrency`` reconciles at once in the ``pool`` (threads, as deployed)."""
    argv = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "controlplane",
        "worker",
        "--loglevel",
        "INFO",
        "--pool",
        pool,
        "--concurrency",
        str(concurrency),
        "--without-mingle",
        "--without-gossip",
        "--without-heartbeat",
    ]
    # (Celery's CLI cannot tell an explicit --pool prefork from its default: the setting decides)
    proc = Process("worker", argv, process_env(WORKER_POOL=pool, **env))
    proc.wait_for_line("ready.", timeout=60)
    return proc


def start_beat(**env: str) -> Process:
    """Celery beat with the database scheduler (the schedule comes from the settings)."""
    argv = [sys.executable, "-m", "celery", "-A", "controlplane", "beat", "--loglevel", "INFO"]
    proc = Process("beat", argv, process_env(**env))
    proc.wait_for_line("beat: Starting", timeout=60)
    return proc


def eventually(check: Callable[[], object], what: str, processes: list[Process], timeout: float = 45) -> None:
    """Wait until ``check()`` holds; on timeout fail with the processes' recent output."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    logs = "\n\n".join(f"--- {p.name} ---\n{p.output()}" for p in processes)
    raise AssertionError(f"{what} did not happen within {timeout} s\n{logs}")


def manage_command(env: dict[str, str], *args: str, stdin: str = "") -> str:
    """``manage.py`` with ``args`` in a process of its own, with ``env``; its output (it must succeed)."""
    done = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, input=stdin, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout
