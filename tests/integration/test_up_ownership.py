"""``manage.py up`` owns its processes: one instance per state directory, busy ports named before
anything starts, and every role (with its own children) gone when ``up`` is stopped by SIGHUP,
by SIGINT even when it was started with SIGINT ignored, or killed outright."""

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

import pytest

from pki import services as pki
from tests.support.processes import ROOT, free_port, process_env

# Each test runs the whole control plane: on the kube tier's worker (--dist loadgroup), so that no
# two whole stacks (or a stack and a real API server's start) share the 2 cores at once.
pytestmark = [
    pytest.mark.integration,
    pytest.mark.django_db(transaction=True),
    pytest.mark.xdist_group("kube"),
]

ROLES = 4  # web, listener, worker, beat (started with --no-demo)


class Up:
    """``manage.py up --no-demo`` in its own session, on its own ports, with its output kept."""

    def __init__(self, preexec_fn: Callable[[], object] | None = None) -> None:
        self.web_port, self.listener_port = free_port(), free_port()
        self.env = process_env(
            WEB_BIND=f"127.0.0.1:{self.web_port}",
            LISTENER_BIND=f"127.0.0.1:{self.listener_port}",
            LISTENER_METRICS_BIND=f"127.0.0.1:{free_port()}",
            WORKER_CONCURRENCY="2",
            # (one gunicorn worker per server: each loads the whole app, and who owns what is the same)
            WEB_WORKERS="1",
            LISTENER_WORKERS="1",
        )
        self.lines: collections.deque[str] = collections.deque(maxlen=300)
        self.roles: set[tuple[int, str]] = set()
        self.proc = subprocess.Popen(
            [sys.executable, "manage.py", "up", "--no-demo"],
            cwd=ROOT,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
            preexec_fn=preexec_fn,
        )
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in iter(self.proc.stdout.readline, ""):
            self.lines.append(line.rstrip())

    def output(self) -> str:
        return "\n".join(self.lines)

    def wait_running(self, timeout: float = 150) -> set[tuple[int, str]]:
        """Wait until every role runs (web and listener accept connections, the worker's pool is
        ready); returns the processes under ``up`` (its children and theirs) as (pid, start time)."""
        wait_until(
            lambda: (
                len(children(self.proc.pid)) >= ROLES
                and port_open(self.web_port)
                and port_open(self.listener_port)
                and any(line.startswith("worker") and " ready." in line for line in list(self.lines))
            ),
            timeout,
            "every role running with web and listener listening",
            self,
        )
        self.roles = descendants(self.proc.pid)
        return self.roles

    def cleanup(self) -> None:
        """Stop ``up``; kill whatever it left behind so a failing test leaks nothing."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        for pid, _ in alive(self.roles):
            os.kill(pid, signal.SIGKILL)


def wait_until(check: Callable[[], bool], timeout: float, what: str, up: Up) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise AssertionError(f"{what} did not happen within {timeout} s:\n{up.output()}")


def port_open(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _stat(pid: int) -> tuple[str, int, str] | None:
    """(state, parent pid, start time) of a process, None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return fields[0], int(fields[1]), fields[19]


def _processes() -> dict[int, tuple[str, int, str]]:
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (stat := _stat(int(entry.name))) is not None:
            found[int(entry.name)] = stat
    return found


def children(pid: int) -> list[int]:
    return [child for child, (_, ppid, _) in _processes().items() if ppid == pid]


def descendants(pid: int) -> set[tuple[int, str]]:
    table = _processes()
    found: set[tuple[int, str]] = set()
    parents = [pid]
    while parents:
        parent = parents.pop()
        for child, (_, ppid, started) in table.items():
            if ppid == parent:
                found.add((child, started))
                parents.append(child)
    return found


def alive(processes: set[tuple[int, str]]) -> set[tuple[int, str]]:
    """The processes still running (a zombie waiting for init to reap it counts as gone)."""
    left = set()
    for pid, started in processes:
        stat = _stat(pid)
        if stat is not None and stat[2] == started and stat[0] not in ("Z", "X"):
            left.add((pid, started))
    return left


@pytest.fixture
def ca() -> None:
    pki.ca_bootstrap()


def test_given_up_running_when_second_up_starts_then_it_stops_at_once_naming_the_first(ca):
    first = Up()
    try:
        wait_until(  # the banner comes after the lock is taken
            lambda: any("Starting the control plane" in line for line in list(first.lines)),
            60,
            "the first up started",
            first,
        )
        second = Up()  # other ports, same state directory
        try:
            second.proc.wait(60)
        finally:
            second.cleanup()
        lines = [line for line in second.lines if line.strip()]
        assert second.proc.returncode == 1, second.output()
        assert len(lines) == 1, second.output()
        assert str(first.proc.pid) in lines[0]
        assert f"127.0.0.1:{first.web_port}" in lines[0]
        assert children(second.proc.pid) == []
    finally:
        first.cleanup()


def test_given_listener_port_in_use_when_up_starts_then_one_line_names_the_port(ca):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        env = process_env(
            WEB_BIND=f"127.0.0.1:{free_port()}",
            LISTENER_BIND=f"127.0.0.1:{port}",
            LISTENER_METRICS_BIND=f"127.0.0.1:{free_port()}",
        )
        result = subprocess.run(
            [sys.executable, "manage.py", "up", "--no-demo"],
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
            start_new_session=True,
        )
    lines = [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]
    assert result.returncode == 1, lines
    assert len(lines) == 1, lines
    assert str(port) in lines[0] and "LISTENER_BIND" in lines[0]


def test_given_up_running_when_sighup_then_every_role_is_gone(ca):
    up = Up()
    try:
        roles = up.wait_running()
        os.kill(up.proc.pid, signal.SIGHUP)
        assert up.proc.wait(30) is not None
        assert alive(roles) == set(), up.output()
    finally:
        up.cleanup()


def test_given_up_started_with_sigint_ignored_when_sigint_then_every_role_is_gone(ca):
    up = Up(preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        roles = up.wait_running()
        os.kill(up.proc.pid, signal.SIGINT)
        assert up.proc.wait(30) is not None
        assert alive(roles) == set(), up.output()
    finally:
        up.cleanup()


def test_given_up_running_when_up_is_killed_then_its_roles_die_shortly_after(ca):
    up = Up()
    try:
        roles = up.wait_running()
        os.kill(up.proc.pid, signal.SIGKILL)
        up.proc.wait(5)
        wait_until(lambda: not alive(roles), 30, "every role gone after up was killed", up)
    finally:
        up.cleanup()
