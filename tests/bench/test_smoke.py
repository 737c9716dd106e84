"""Benchmarks that cannot rot: every ``bench/*.py`` script runs in its ``--smoke`` mode.

The scripts are found, not listed: any ``bench/*.py`` with a ``__main__`` block is a benchmark, so
one added later is covered without touching this file. Each runs as a subprocess in a session of
its own, on SQLite and the filesystem broker in a temporary state directory, and must exit 0 with
its closing line (``<name>: key=value ...``, the name the script's or the start of it: ``e2e:`` for
``e2e_latency.py``) last. No timing is asserted: smoke figures mean
nothing. Afterwards no process of the run may be left: every process a benchmark starts carries
the run's ``CONTROLPLANE_BENCH_RUN`` mark in its environment (bench/common.py), which is looked
for here; whatever is found is killed and fails the test. Nor may a scratch directory of the run
be left (its certificates and private keys, its logs): ``bench/common.scratch_dir`` names each
after the run's mark, and whatever is found is removed and fails the test.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
MARK = "CONTROLPLANE_BENCH_RUN"
SCRIPTS = sorted(
    path for path in BENCH.glob("*.py") if re.search(r"""__name__ == ["']__main__["']""", path.read_text())
)
CLOSING = re.compile(r"^(?P<name>[a-z][a-z0-9_]*): (\S+=\S+ ?)+$")

pytestmark = pytest.mark.integration


def marked(mark: str) -> list[int]:
    """Processes whose environment carries this run's mark."""
    needle = f"{MARK}={mark}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if needle in (entry / "environ").read_bytes().split(b"\0"):
                    found.append(int(entry.name))
    return found


def left_behind(mark: str, grace: float = 10) -> list[str]:
    """The run's processes still alive after ``grace`` seconds (then killed): their command lines."""
    deadline = time.monotonic() + grace
    while (pids := marked(mark)) and time.monotonic() < deadline:
        time.sleep(0.2)
    lines = []
    for pid in pids:
        with contextlib.suppress(OSError):
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            lines.append(f"{pid}: {command[:200]}")
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return lines


def bench_env(tmp_path: Path, mark: str) -> dict[str, str]:
    """The suite's environment without its database and broker (the benchmark deletes what it
    creates in its database): SQLite and the filesystem broker in a state directory of its own."""
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("DATABASE_", "CELERY_", "BENCH_", "CONTROLPLANE_", "DJANGO_", "PYTEST_"))
    }
    env.update({MARK: mark, "CONTROLPLANE_STATE_DIR": str(tmp_path / "state"), "PYTHONUNBUFFERED": "1"})
    return env


def run(script: Path, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    proc = subprocess.Popen(
        [sys.executable, str(script), "--smoke"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGINT)  # as Ctrl-C: the benchmark stops what it started
        try:
            out, _ = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
        pytest.fail(f"{script.name} --smoke did not finish within {timeout:.0f} s:\n{out[-4000:]}")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out)


def test_the_benchmarks_are_found():
    assert {path.stem for path in SCRIPTS} >= {"fleet", "listener", "admin_pages", "chaos"}
    assert "common" not in {path.stem for path in SCRIPTS}


def needs(script: Path) -> list[pytest.MarkDecorator]:
    """A benchmark that starts real Kubernetes (it imports ``envtest``) is of the kube tier, one
    that installs the control plane on it (``envtest.install``) of the install tier (on that tier's
    worker): each runs where its tier does, as ``make test`` decides."""
    text = script.read_text()
    if re.search(r"^\s*from envtest\.install import", text, re.MULTILINE):
        return [pytest.mark.install, pytest.mark.xdist_group("install")]
    uses_envtest = re.search(r"^\s*(from|import) envtest\b", text, re.MULTILINE)
    return [pytest.mark.kube] if uses_envtest else []


def timeout_of(script: Path) -> float:
    """An installation (images, four API servers, every role) takes minutes before the run."""
    return 900 if pytest.mark.install in needs(script) else 240


@pytest.mark.parametrize(
    "script", [pytest.param(script, marks=needs(script), id=script.stem) for script in SCRIPTS]
)
def test_given_a_benchmark_when_run_with_smoke_then_it_prints_its_closing_line_and_leaves_nothing(
    script, tmp_path
):
    mark = uuid.uuid4().hex
    result = run(script, bench_env(tmp_path, mark), timeout=timeout_of(script))
    leftovers = left_behind(mark)
    scratch = sorted(Path(tempfile.gettempdir()).glob(f"*{mark[:12]}*"))  # (bench/common.scratch_dir)
    for path in scratch:
        shutil.rmtree(path, ignore_errors=True)
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    assert result.returncode == 0, (
        f"{script.name} --smoke exited {result.returncode}:\n{result.stdout[-4000:]}"
    )
    closing = CLOSING.match(lines[-1]) if lines else None
    assert closing and script.stem.startswith(closing["name"]), (
        f"{script.name} --smoke did not end with '{script.stem}: key=value ...':\n{result.stdout[-2000:]}"
    )
    assert not leftovers, f"{script.name} --smoke left processes behind:\n" + "\n".join(leftovers)
    assert not scratch, f"{script.name} --smoke left its scratch directories: {[p.name for p in scratch]}"


def start_chaos(tmp_path: Path, mark: str) -> subprocess.Popen:
    """chaos.py --smoke, once its Redis and two of every role (web, listener, worker, beat) run
    (then it kills them as it goes: the count is checked here, when it was reached, not later)."""
    proc = subprocess.Popen(
        [sys.executable, str(BENCH / "chaos.py"), "--smoke"],
        cwd=ROOT,
        env=bench_env(tmp_path, mark),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while (started := len(marked(mark))) < 9 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert proc.poll() is None, "the benchmark ended before its processes were all up"
        assert started >= 9, f"only {started} processes of the run started"
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        left_behind(mark, grace=0)  # (kills them)
        raise
    return proc


def test_given_a_benchmark_interrupted_with_ctrl_c_then_it_leaves_nothing_behind(tmp_path):
    """Ctrl-C while its Redis, servers, workers and beats run: all of them stop."""
    mark = uuid.uuid4().hex
    proc = start_chaos(tmp_path, mark)
    try:
        os.killpg(proc.pid, signal.SIGINT)  # a terminal's Ctrl-C reaches the foreground group
        proc.wait(60)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    assert not left_behind(mark), "processes left behind after Ctrl-C"


def test_given_a_benchmark_killed_with_sigkill_then_what_it_started_stops_too(tmp_path):
    """SIGKILL runs no handler of the benchmark's: what it started stops on the kernel's word."""
    mark = uuid.uuid4().hex
    proc = start_chaos(tmp_path, mark)
    try:
        proc.kill()  # the benchmark alone: not its group, and nothing of it can clean up
        proc.wait(10)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    assert not left_behind(mark, grace=60), "processes left behind after SIGKILL"
