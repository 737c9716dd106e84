"""The kube tier's pod networks: a node's address block is its own across processes."""

from __future__ import annotations

import os
import sys

from envtest.kubelet import PodNetwork
from tests.support.processes import Process

# Another test process (an xdist worker, another session) that takes a block and keeps running.
HOLDER = """
import time
from envtest.kubelet import PodNetwork
print(PodNetwork.free_block(), flush=True)
time.sleep(600)
"""


def test_given_a_block_another_process_holds_then_it_is_not_taken_until_that_process_ends():
    holder = Process("holder", [sys.executable, "-c", HOLDER], dict(os.environ))
    try:
        holder.wait_for(lambda: bool(holder.lines), 30, "its block")
        block = int(holder.lines[0])
        assert not PodNetwork._hold(block)
    finally:
        holder.stop()
    assert PodNetwork._hold(block)  # the kernel let go of the ended process's lock
    os.close(PodNetwork._held.pop(block))
