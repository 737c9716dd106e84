"""The whole chain on one machine, every part real:

emulated runtime (with the control plane's ValidatingWebhookConfiguration) → our runtime watcher
process (started by the loopback kubelet from the Deployment the worker applied) → the listener
(gunicorn, mutual TLS with certificates from our PKI) → broker → Celery worker → the Kyma's
reconcile, observed through the database. Then the watcher is stopped: beat notices the silence,
the Kyma turns Warning with the ``WatcherHeartbeat`` condition, and recovers when it is back.
"""

from __future__ import annotations

import pytest

from fleet.models import Kyma, ReconcileRecord
from listener.models import WatchEventRecord
from pki import services as pki
from runtime_emulator.kubelet import ProcessKubelet
from tests.support.listener import start_listener
from tests.support.processes import eventually, start_beat, start_worker
from tests.support.runtimes import connected_kyma, klm_watcher

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

SILENT_AFTER = "3"


def condition(kyma_id: int, type_: str) -> tuple[str, str] | None:
    for c in Kyma.objects.get(pk=kyma_id).conditions:
        if c["type"] == type_:
            return (c["status"], c["reason"])
    return None


@pytest.fixture
def control_plane():
    pki.ca_bootstrap()
    klm_watcher()
    timing = {"WATCHER_SILENT_AFTER": SILENT_AFTER}
    listener = start_listener(**timing)
    started = [listener.process]
    try:
        started.append(
            start_worker(
                concurrency=2,
                WATCHER_KCP_ADDR=f"localhost:{listener.port}",
                WATCHER_HEARTBEAT_INTERVAL="1",
                RECONCILE_PROCESSING_INTERVAL="1",
                RECONCILE_WARNING_INTERVAL="2",
                **timing,
            )
        )
        started.append(start_beat(WATCHER_SILENT_CHECK_INTERVAL="1", RECONCILE_SWEEP_INTERVAL="1", **timing))
        yield started
    finally:
        for process in reversed(started):
            process.stop()


@pytest.fixture
def kubelet(emulator_host):
    kubelet = ProcessKubelet(restart_backoff=(0.2, 1))
    yield kubelet
    emulator_host.run(kubelet.aclose())


def test_a_change_in_a_runtime_reaches_its_reconcile_and_a_silent_watcher_is_noticed(
    control_plane, kubelet, runtimes, emulator_host
):
    runtime = runtimes()
    runtime.kubelet = kubelet
    kyma = connected_kyma(runtime, modules=[])

    # The worker deploys the watcher; its first heartbeat through the listener completes the picture.
    eventually(
        lambda: (
            Kyma.objects.get(pk=kyma.pk).state == "Ready"
            and condition(kyma.pk, "WatcherHeartbeat") == ("True", "Heartbeat")
        ),
        "Kyma Ready with a reporting watcher",
        control_plane,
    )
    pod = kubelet.pod(runtime.name)
    assert pod is not None and pod.process.poll() is None

    # A user edits the runtime's Kyma: webhook → watcher → listener → broker → worker → reconcile.
    last = ReconcileRecord.objects.filter(kyma_id=kyma.pk).order_by("-id").values_list("id", flat=True)[0]
    runtime.edit_as_user("Kyma", "default", lambda obj: obj["spec"].update(channel="fast"), "kyma-system")
    eventually(
        lambda: Kyma.objects.get(pk=kyma.pk).channel == "fast",
        "the control plane's copy follows the runtime",
        control_plane,
        timeout=15,
    )
    events = WatchEventRecord.objects.filter(
        kyma_id=kyma.pk,
        component="lifecycle-manager",
        watched_namespace="kyma-system",
        watched_name="default",
    )
    eventually(
        lambda: events.filter(gvk_kind="Kyma").exists(), "the event on record", control_plane, timeout=5
    )
    eventually(  # the record is written after the status that carries the new channel
        lambda: ReconcileRecord.objects.filter(kyma_id=kyma.pk, id__gt=last).exists(),
        "the reconcile on record",
        control_plane,
        timeout=5,
    )

    # The watcher goes away (its pod still looks ready to the runtime): beat notices the silence.
    emulator_host.run(kubelet.stop_process(runtime.name))
    eventually(
        lambda: (
            condition(kyma.pk, "WatcherHeartbeat") == ("False", "WatcherSilent")
            and Kyma.objects.get(pk=kyma.pk).state == "Warning"
        ),
        "the silent-watcher condition",
        control_plane,
    )

    # It comes back: its first heartbeat queues a reconcile that clears the condition.
    emulator_host.run(kubelet.resume_process(runtime.name))
    eventually(
        lambda: (
            condition(kyma.pk, "WatcherHeartbeat") == ("True", "Heartbeat")
            and Kyma.objects.get(pk=kyma.pk).state == "Ready"
        ),
        "recovery once the watcher reports again",
        control_plane,
    )
