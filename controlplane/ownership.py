"""What lets ``manage.py up`` own the processes it starts.

- One instance per state directory: an exclusive ``flock`` on ``STATE_DIR/up.lock``, which also
  records the running instance's PID and URLs so a second ``up`` can name them. The kernel drops
  the lock when the process dies, however it dies, so a stale file never blocks a restart.
- Ports are tried before anything starts, so a busy one is named in one line instead of a role
  failing later among its banners.
- Children die with their parent: on Linux each role asks the kernel (``PR_SET_PDEATHSIG``) for
  SIGTERM when ``up`` dies, even by SIGKILL; each role then stops its own children. A watchdog
  process ends the roles' whole group as well, SIGKILL after a grace period, for whatever that
  misses (grandchildren, a role that hangs while stopping, systems without ``prctl``).
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

PR_SET_PDEATHSIG = 1


class AlreadyRunning(Exception):
    """Another process holds the state directory's lock; ``details`` is what it wrote there."""

    def __init__(self, details: dict[str, Any]) -> None:
        super().__init__(details)
        self.details = details


class InstanceLock:
    """An exclusive, non-blocking ``flock`` held for the life of the process."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file: IO[str] | None = None

    def acquire(self, details: dict[str, Any]) -> None:
        """Take the lock and write ``details`` (with our PID) into it; raises AlreadyRunning."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        file = open(self.path, "a+")  # noqa: SIM115 - held open until the process exits
        try:
            fcntl.flock(file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            file.seek(0)
            text = file.read()
            file.close()
            try:
                holder = json.loads(text)
            except ValueError:  # the holder has the lock but has not written it yet
                holder = {}
            raise AlreadyRunning(holder if isinstance(holder, dict) else {}) from None
        file.seek(0)
        file.truncate()
        file.write(json.dumps({"pid": os.getpid(), **details}))
        file.flush()
        self._file = file


def _bind_problem(bind: str) -> str | None:
    """Why ``bind`` (HOST:PORT) cannot be listened on now, or None if it can."""
    host, _, port = bind.rpartition(":")
    try:
        infos = socket.getaddrinfo(
            host.strip("[]") or None, int(port), type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except (socket.gaierror, ValueError) as error:
        return f"not a usable HOST:PORT ({error})"
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as sock:
        # Like gunicorn: a connection in TIME_WAIT does not make the port busy.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(address)
        except OSError as error:
            if error.errno == errno.EADDRINUSE:
                return f"port {port} is already in use"
            return error.strerror or str(error)
    return None


def bind_problems(binds: dict[str, str]) -> list[str]:
    """``NAME HOST:PORT (why)`` for each setting whose address cannot be listened on now."""
    return [
        f"{name} {bind} ({problem})"
        for name, bind in binds.items()
        if bind and (problem := _bind_problem(bind)) is not None
    ]


def die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child get SIGTERM when this process dies (Linux only).

    Everything it calls is resolved before the fork. If the parent died between fork and
    ``prctl``, the child would never be told: it checks and stops itself.
    """
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    parent = os.getpid()

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGTERM)

    return preexec


# Run as ``python -c WATCHDOG FD PGID GRACE`` in a process group of its own: blocks on the pipe
# whose other end only ``up`` holds; when ``up`` is gone (or closes it), it sends SIGTERM to the
# roles' group, waits up to GRACE seconds for the group to empty, then SIGKILLs what is left.
# It catches what PR_SET_PDEATHSIG cannot: grandchildren, a role that hangs while stopping, and
# systems without prctl.
WATCHDOG = """
import os, signal, sys, time
fd, pgid, grace = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
while os.read(fd, 1):
    pass
def send(sig):
    try:
        os.killpg(pgid, sig)
        return True
    except ProcessLookupError:
        return False
deadline = time.monotonic() + grace
if send(signal.SIGTERM):
    while send(0) and time.monotonic() < deadline:
        time.sleep(0.1)
    send(signal.SIGKILL)
"""


class Watchdog:
    """Ends a process group once this process is gone, however it went (see WATCHDOG)."""

    def __init__(self, pgid: int, grace: float = 10) -> None:
        read, self._write = os.pipe()
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", WATCHDOG, str(read), str(pgid), str(grace)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                pass_fds=(read,),
                process_group=0,
            )
        finally:
            os.close(read)

    def release(self, timeout: float = 15) -> None:
        """Let the watchdog run now (the group should be empty already) and wait for it."""
        os.close(self._write)
        self.proc.wait(timeout)
