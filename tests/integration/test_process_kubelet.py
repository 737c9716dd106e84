"""The loopback kubelet: runtime-watcher Deployments of emulated runtimes run as real processes."""

from __future__ import annotations

import os
import signal
import time
import urllib.request
from collections.abc import Callable

import pytest

from fleet.services import kymas as kyma_services
from pki import services as pki
from runtime_emulator.kubelet import ProcessKubelet
from tests.reconciler.helpers import conditions, reconcile
from tests.support.runtimes import connected_kyma, klm_watcher

pytestmark = [pytest.mark.integration, pytest.mark.django_db]


def eventually(check: Callable[[], object], what: str, timeout: float = 30) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"{what} did not happen within {timeout} s")


def metric(url: str, name: str) -> float:
    try:
        text = urllib.request.urlopen(url, timeout=2).read().decode()
    except OSError:
        return -1
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name + " "))


@pytest.fixture(autouse=True)
def catalog():
    pki.ca_bootstrap()
    klm_watcher()


@pytest.fixture
def kubelet(emulator_host):
    # Port 1 refuses connections: these tests look at the runtime side only.
    kubelet = ProcessKubelet(
        env={"KCP_ADDR": "localhost:1", "HEARTBEAT_INTERVAL": "0"}, restart_backoff=(0.2, 1)
    )
    yield kubelet
    emulator_host.run(kubelet.aclose())


@pytest.fixture
def runtime(runtimes, kubelet):
    runtime = runtimes()
    runtime.kubelet = kubelet
    return runtime


def ready_replicas(runtime) -> int:
    deployment = runtime.get_object("Deployment", "skr-webhook", "kyma-system") or {}
    return (deployment.get("status") or {}).get("readyReplicas", 0)


def test_given_a_reconciled_kyma_then_its_watcher_runs_and_receives_the_runtimes_admission_reviews(
    runtime, kubelet
):
    kyma = connected_kyma(runtime, modules=[])
    reconcile(kyma)
    eventually(lambda: ready_replicas(runtime) == 1, "the runtime watcher ready")
    reconcile(kyma)
    assert conditions(kyma)["SKRWebhook"] == ("True", "Ready")
    pod = kubelet.pod(runtime.name)
    assert pod is not None and pod.process.poll() is None
    assert runtime.service_endpoints[("kyma-system", "skr-webhook")][1] in pod.ports.values()

    runtime.edit_as_user("Kyma", "default", lambda obj: obj["spec"].update(channel="fast"), "kyma-system")
    # the emulator's admission called our process over TLS (Kyma certificate, caBundle from our CA)
    assert metric(pod.metrics_url(), "watcher_admission_request_total") >= 1
    eventually(lambda: metric(pod.metrics_url(), "watcher_kcp_requests_total") >= 1, "a send attempt")


def test_given_a_watcher_that_dies_then_it_shows_crash_loop_backoff_and_is_restarted(runtime, kubelet):
    kyma = connected_kyma(runtime, modules=[])
    reconcile(kyma)
    eventually(lambda: ready_replicas(runtime) == 1, "the runtime watcher ready")
    first = kubelet.pod(runtime.name).process.pid
    os.killpg(first, signal.SIGKILL)
    eventually(lambda: kubelet.pod(runtime.name).restarts == 1, "a restart")
    eventually(
        lambda: kubelet.pod(runtime.name).process.pid != first and ready_replicas(runtime) == 1,
        "ready again with a new process",
    )


def test_given_a_new_certificate_then_the_watcher_restarts_with_it(runtime, kubelet):
    kyma = connected_kyma(runtime, modules=[])
    reconcile(kyma)
    eventually(lambda: ready_replicas(runtime) == 1, "the runtime watcher ready")
    pod = kubelet.pod(runtime.name)
    first, cert_path = pod.process.pid, pod.local_path("/etc/skr-webhook/tls/tls.crt")
    old = cert_path.read_bytes()
    pki.certificate_issue_for_kyma(kyma=kyma)
    reconcile(kyma)
    pod = kubelet.pod(runtime.name)
    assert pod.process.pid != first  # the pod template's restart label changed
    assert pod.local_path("/etc/skr-webhook/tls/tls.crt").read_bytes() != old
    eventually(lambda: ready_replicas(runtime) == 1, "ready with the new certificate")


def test_given_a_deleted_kyma_then_its_watcher_process_stops(runtime, kubelet):
    kyma = connected_kyma(runtime, modules=[])
    reconcile(kyma)
    eventually(lambda: ready_replicas(runtime) == 1, "the runtime watcher ready")
    process = kubelet.pod(runtime.name).process
    kyma_services.kyma_delete(kyma=kyma)
    for _ in range(5):
        if reconcile(kyma) is None:
            break
    assert process.poll() is not None
    assert kubelet.pod(runtime.name) is None
    assert ("kyma-system", "skr-webhook") not in runtime.service_endpoints
