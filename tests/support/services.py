"""Redis and PostgreSQL servers of a test's own, to stop and start (never the shared ones).

Each runs from Debian's binaries on a free port with its data in a temporary directory; Redis
keeps an append-only file (as a broker in production must: a Redis that forgets its queue on a
restart loses every task in it, whatever the workers do), so a stop and a start keep the queue.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from tests.support.processes import free_port


def _wait(check, what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise TimeoutError(f"{what} within {timeout} s")


class OwnRedis:
    """``redis-server`` on a free port; :meth:`stop` and :meth:`start` as often as needed."""

    def __init__(self, directory: Path, *, binary: str | None = None) -> None:
        self.directory = directory
        self.directory.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.binary = binary or shutil.which("redis-server") or "redis-server"
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def ping(self) -> bool:
        result = subprocess.run(
            ["redis-cli", "-p", str(self.port), "ping"], capture_output=True, text=True, check=False
        )
        return result.stdout.strip() == "PONG"

    def start(self) -> OwnRedis:
        self.proc = subprocess.Popen(
            [
                self.binary,
                "--bind",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--dir",
                str(self.directory),
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
                "--save",
                "",
                "--databases",
                "4",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        _wait(self.ping, f"redis on port {self.port} answering")
        return self

    def stop(self) -> None:
        """SIGTERM: Redis writes its append-only file and exits (a restart finds the queue)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        self.proc = None

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.directory, ignore_errors=True)


def _postgres_user() -> dict:
    """initdb and postgres refuse to run as root: as root, run them as ``postgres``."""
    if os.geteuid() != 0:
        return {}
    entry = pwd.getpwnam("postgres")
    return {"user": entry.pw_uid, "group": entry.pw_gid}


def _pg_bin(name: str) -> str:
    for version in sorted(Path("/usr/lib/postgresql").glob("*"), reverse=True):
        if (version / "bin" / name).exists():
            return str(version / "bin" / name)
    return shutil.which(name) or name


class OwnPostgres:
    """A PostgreSQL cluster of its own (``initdb`` into a temporary directory) on a free port.
    As root, the cluster belongs to ``postgres`` and lives in a directory of its own under the
    system's temporary directory (pytest's are not open to other users); :meth:`remove` deletes it."""

    def __init__(self, directory: Path) -> None:
        self._as = _postgres_user()
        self.directory = Path(tempfile.mkdtemp(prefix="own-postgres-")) if self._as else directory
        self.data = self.directory / "data"
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/postgres"

    def init(self) -> OwnPostgres:
        self.directory.mkdir(parents=True, exist_ok=True)
        if self._as:
            os.chown(self.directory, self._as["user"], self._as["group"])
        subprocess.run(
            [_pg_bin("initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8"],
            check=True,
            capture_output=True,
            **self._as,
        )
        return self

    def ready(self) -> bool:
        result = subprocess.run(
            [_pg_bin("pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(self.port)], check=False
        )
        return result.returncode == 0

    def start(self) -> OwnPostgres:
        self.proc = subprocess.Popen(
            [
                _pg_bin("postgres"),
                "-D",
                str(self.data),
                "-h",
                "127.0.0.1",
                "-p",
                str(self.port),
                "-k",
                str(self.directory),
                "-c",
                "fsync=off",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            **self._as,
        )
        _wait(self.ready, f"postgres on port {self.port} answering")
        return self

    def stop(self) -> None:
        """A fast shutdown (SIGINT): sessions are cut, as when the database goes away."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        self.proc = None

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.directory, ignore_errors=True)
