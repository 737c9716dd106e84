"""The benchmarks' CPU accounting (bench/common.py): a role's CPU never shrinks during a run."""

from __future__ import annotations

import os
import sys

from bench.common import cpu_by_role
from tests.support.processes import Process

# A parent that starts a child burning about 0.3 s of CPU, waits for it, then stays.
BURN = "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass"
PARENT = f"""
import subprocess, sys, time
subprocess.run([sys.executable, "-c", {BURN!r}])
print("child done", flush=True)
time.sleep(600)
"""


def test_given_a_child_that_ended_then_its_cpu_stays_with_its_role():
    parent = Process("parent", [sys.executable, "-c", PARENT], dict(os.environ))
    try:
        parent.wait_for_line("child done")  # the child ended and was reaped
        used = cpu_by_role({"role": [parent.proc.pid]})["role"]
        assert used >= 0.25, used
    finally:
        parent.stop()
