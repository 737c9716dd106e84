"""The loopback kubelet's watcher processes die with the process that started them (Linux)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"  # a zombie has exited; only its parent's reaping is left


def wait_for(check, what: str, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError(f"{what} did not happen within {timeout} s")


def test_given_the_starter_is_killed_then_the_watcher_process_goes_too(tmp_path):
    pidfile = tmp_path / "watcher.pid"
    starter = textwrap.dedent(
        f"""
        import os, subprocess, sys, time
        from runtime_emulator.kubelet import DIE_WITH_PARENT
        sleeper = [sys.executable, "-c", "import time; time.sleep(600)"]
        child = subprocess.Popen([sys.executable, "-c", DIE_WITH_PARENT, str(os.getpid()), *sleeper])
        open({str(pidfile)!r}, "w").write(str(child.pid))
        time.sleep(600)
        """
    )
    parent = subprocess.Popen([sys.executable, "-c", starter], cwd=ROOT, start_new_session=True)
    try:
        wait_for(lambda: pidfile.exists() and pidfile.read_text(), "the watcher started")
        watcher = int(pidfile.read_text())
        wait_for(lambda: running(watcher), "the watcher runs")

        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(10)

        wait_for(lambda: not running(watcher), "the watcher stopped with its starter")
    finally:
        if parent.poll() is None:
            os.killpg(parent.pid, signal.SIGKILL)
