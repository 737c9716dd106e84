"""``manage.py up`` (what ``make run`` starts): every role plus simulated runtimes, as a newcomer
sees it: the demo Kymas go Ready with their watchers reporting, a runtime edit reaches the control
plane, and stopping ``up`` leaves no process behind."""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Callable
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command

from fleet.k8s.client import RuntimeClient, client_for
from fleet.models import Kyma
from listener.models import WatchEventRecord
from pki import services as pki
from tests.support.processes import Process, free_port, process_env

# Each test runs the whole control plane: on the kube tier's worker (--dist loadgroup), so that no
# two whole stacks (or a stack and a real API server's start) share the 2 cores at once.
pytestmark = [
    pytest.mark.integration,
    pytest.mark.django_db(transaction=True),
    pytest.mark.xdist_group("kube"),
]


def eventually(check: Callable[[], object], what: str, up: Process, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if up.proc.poll() is not None:
            raise AssertionError(f"up exited ({up.proc.returncode}) before {what}:\n{up.output()}")
        if check():
            return
        time.sleep(0.2)
    raise AssertionError(f"{what} did not happen within {timeout} s:\n{up.output()}")


def keda_replicas(runtime: RuntimeClient) -> int | None:
    deployment = runtime.get("apps/v1", "Deployment", "keda-operator", "kyma-system")
    return deployment and deployment["spec"]["replicas"]


def watcher_processes(kcp_addr: str) -> list[int]:
    """Runtime-watcher processes that report to this listener (found through /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if b"watchers.runtime" in cmdline and f"KCP_ADDR={kcp_addr}".encode() in environ.split(b"\0"):
            found.append(int(entry.name))
    return found


def test_up_runs_the_control_plane_with_simulated_runtimes_whose_changes_flow_in():
    pki.ca_bootstrap()
    listener_port = free_port()
    env = process_env(
        WEB_BIND=f"127.0.0.1:{free_port()}",
        LISTENER_BIND=f"127.0.0.1:{listener_port}",
        LISTENER_METRICS_BIND=f"127.0.0.1:{free_port()}",
        WORKER_CONCURRENCY="2",
    )
    up = Process("up", [sys.executable, "manage.py", "up"], env)
    try:
        eventually(
            lambda: (
                Kyma.objects.filter(name__startswith="demo-", state="Ready").count() == 3
                and Kyma.objects.filter(
                    name__startswith="demo-", watcher_contact__last_seen_at__isnull=False
                ).count()
                == 3
            ),
            "three demo Kymas Ready with reporting watchers",
            up,
        )
        assert len(watcher_processes(f"localhost:{listener_port}")) == 3

        out = StringIO()
        call_command("runtime_edit", "demo-2", "--channel", "fast", stdout=out)
        assert "channel=fast" in out.getvalue()
        eventually(
            lambda: (
                Kyma.objects.get(name="demo-2").channel == "fast"
                and WatchEventRecord.objects.filter(kyma__name="demo-2").exists()
            ),
            "the edit arrives as an event and the reconcile adopts it",
            up,
            timeout=15,
        )

        # The module loop: the SDK's example keda manager answers the keda CR's spec with a
        # Deployment in that runtime, and follows an edit of the CR made inside the runtime.
        kyma = Kyma.objects.get(name="demo-3")
        runtime = client_for(kyma.pk, kyma.kubeconfig)
        eventually(lambda: keda_replicas(runtime) == 1, "the keda manager's Deployment in demo-3", up)
        out = StringIO()
        call_command("runtime_edit", "demo-3", "--module-spec", "keda", "replicas=3", stdout=out)
        assert "replicas=3" in out.getvalue()
        eventually(lambda: keda_replicas(runtime) == 3, "the manifest follows the CR", up, timeout=20)
    finally:
        up.signal(signal.SIGINT)
        up.proc.wait(30)
    deadline = time.monotonic() + 10
    while watcher_processes(f"localhost:{listener_port}") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert watcher_processes(f"localhost:{listener_port}") == []
