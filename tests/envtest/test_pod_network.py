"""The kube tier's pod networks: a node's address block is its own across processes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from envtest.kubelet import PodNetwork

ROOT = Path(__file__).resolve().parents[2]
# Another test process (an xdist worker, another session) that takes a block and keeps running.
HOLDER = """
import sys
from pathlib import Path
from envtest.kubelet import PodNetwork
print(PodNetwork.free_block(), flush=True)
sys.stdin.read()
"""


def test_given_a_block_another_process_holds_then_it_is_not_taken_until_that_process_ends():
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        block = int(holder.stdout.readline())
        assert not PodNetwork._hold(block)
    finally:
        holder.kill()
        holder.wait(timeout=10)
    assert PodNetwork._hold(block)  # the kernel let go of the ended process's lock
    os.close(PodNetwork._held.pop(block))
