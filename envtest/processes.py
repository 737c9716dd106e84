"""Child processes of the harness: each in its own session, its output in a log file, stopped
with its whole group, and ended by the kernel when the thread that started it ends (Linux
``PR_SET_PDEATHSIG``), so a killed test run leaves no etcd or API server behind."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # runs in the child between fork and exec
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


class ProcessFailed(RuntimeError):
    """A child exited, or did not become ready in time; the message ends with its last output."""


class Child:
    """One supervised child process (see the module docstring)."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        *,
        log: Path,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.name = name
        self.log = log
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as output:
            self.proc = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                env=dict(env) if env is not None else None,
                cwd=cwd,
                start_new_session=True,
                preexec_fn=_die_with_parent if sys.platform == "linux" else None,
            )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def running(self) -> bool:
        return self.proc.poll() is None

    def tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def wait_until(self, ready: Callable[[], bool], *, timeout: float, what: str) -> None:
        """Poll ``ready`` until it holds; fail at once when the process exits."""
        deadline = time.monotonic() + timeout
        while True:
            if not self.running():
                raise ProcessFailed(
                    f"{self.name} exited ({self.proc.returncode}) before {what}:\n{self.tail()}"
                )
            with contextlib.suppress(OSError):
                if ready():
                    return
            if time.monotonic() > deadline:
                raise ProcessFailed(
                    f"{self.name}: {what} did not happen within {timeout:.0f} s:\n{self.tail()}"
                )
            time.sleep(0.05)

    def stop(self, timeout: float = 10) -> None:
        """SIGTERM to the whole group, SIGKILL after ``timeout``."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # anything of the group still there
