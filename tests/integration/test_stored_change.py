"""The reconcile an event starts reads the change the event reported, however late it is stored.

Every part real (emulated runtime → our watcher process → listener → broker → worker). The
emulated API server stores the user's edit 200 ms after its webhooks answered, twice the listener's
fixed delay for upstream's events (``LISTENER_RECONCILE_DELAY`` 0.1 s): a reconcile that waited
only that delay would read the old spec, and nothing else would reconcile the Kyma again (beat
sweeps a Ready Kyma only after an hour). Our watcher says which change it saw, so the reconcile
starts at once and reads until the change is stored.

Beat runs too, as in production: it reconciles a Kyma again while it is Processing (its watcher's
pod turns Ready at its readiness probe's period), never a Ready one within the hour. Without it,
when the first heartbeat's reconcile came together with an event's, before the pod was Ready,
nothing reconciled the Kyma again and it stayed Processing (a CI run on b15b8ac).
"""

from __future__ import annotations

import pytest

from fleet import queue
from fleet.models import Kyma, ReconcileRecord
from pki import services as pki
from runtime_emulator.kubelet import ProcessKubelet
from tests.support.listener import start_listener
from tests.support.processes import eventually, start_beat, start_worker
from tests.support.runtimes import connected_kyma, klm_watcher

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def control_plane():
    pki.ca_bootstrap()
    klm_watcher()
    # Today's defaults for events without a change: the reconcile would read 100 ms after the event.
    listener = start_listener(LISTENER_RECONCILE_DELAY="0.1", LISTENER_EVENT_MARGIN="0.05")
    started = [listener.process]
    try:
        settings = {
            "WATCHER_KCP_ADDR": f"localhost:{listener.port}",
            "WATCHER_HEARTBEAT_INTERVAL": "1",
            "RECONCILE_READY_INTERVAL": "3600",
            "RECONCILE_PROCESSING_INTERVAL": "1",
            "RECONCILE_MIN_SPACING": "0",
            "RECONCILE_STORED_WAIT": "5",
        }
        started.append(start_worker(**settings))
        started.append(start_beat(**settings))
        yield started
    finally:
        for process in reversed(started):
            process.stop()


@pytest.fixture
def kubelet(emulator_host):
    kubelet = ProcessKubelet(restart_backoff=(0.2, 1))
    yield kubelet
    emulator_host.run(kubelet.aclose())


def test_a_change_stored_200_ms_after_the_webhooks_is_what_the_reconcile_reads(
    control_plane, kubelet, runtimes
):
    runtime = runtimes()
    runtime.kubelet = kubelet
    kyma = connected_kyma(runtime, modules=[])
    quiet_checks: list[bool] = []

    def quiet() -> bool:
        """Ready, its watcher heard (that heartbeat's reconcile done too), nothing queued or running:
        twice in a row, so no request sat between two of these reads."""
        row = Kyma.objects.get(pk=kyma.pk)
        now_quiet = (
            row.state == "Ready"
            and row.watcher_last_seen_at is not None
            and not row.lease_owner
            and not queue.queued([kyma.pk])
        )
        quiet_checks.append(now_quiet)
        return quiet_checks[-2:] == [True, True]

    eventually(quiet, "Kyma Ready with its watcher reporting, and nothing queued", control_plane)
    last = ReconcileRecord.objects.filter(kyma_id=kyma.pk).order_by("-id").values_list("id", flat=True)[0]
    calls = len(runtime.webhook_calls)

    runtime.store_delay = 0.2
    runtime.edit_as_user("Kyma", "default", lambda obj: obj["spec"].update(channel="fast"), "kyma-system")

    eventually(
        lambda: ReconcileRecord.objects.filter(kyma_id=kyma.pk, id__gt=last).exists(),
        "the reconcile of the event",
        control_plane,
        timeout=15,
    )
    assert Kyma.objects.get(pk=kyma.pk).channel == "fast"  # it read the stored change
    after = ReconcileRecord.objects.filter(kyma_id=kyma.pk, id__gt=last)
    assert after.count() == 1  # one event, one reconcile: nothing else could have caught up
    edits = [c for c in runtime.webhook_calls[calls:] if c.request["operation"] == "UPDATE"]
    assert len(edits) == 1  # the edit was stored without a second webhook call (and event)
