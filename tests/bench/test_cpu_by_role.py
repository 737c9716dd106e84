"""The benchmarks' CPU accounting (bench/common.py): a role's CPU never shrinks during a run."""

from __future__ import annotations

import subprocess
import sys

from bench.common import cpu_by_role

# A parent that starts a child burning about 0.3 s of CPU, waits for it, then waits on its stdin.
BURN = "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass"
PARENT = f"""
import subprocess, sys
subprocess.run([sys.executable, "-c", {BURN!r}])
print("child done", flush=True)
sys.stdin.read()
"""


def test_given_a_child_that_ended_then_its_cpu_stays_with_its_role():
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert parent.stdout.readline().strip() == "child done"  # the child ended and was reaped
        used = cpu_by_role({"role": [parent.pid]})["role"]
        assert used >= 0.25, used
    finally:
        parent.kill()
        parent.wait(timeout=10)
