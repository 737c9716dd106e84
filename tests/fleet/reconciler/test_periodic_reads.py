"""A periodic reconcile of a runtime whose watcher is alive trusts the watcher's events for the
runtime's Kyma and the module CRs: a no-op reads only the watcher's own Secret, Deployment and
webhook configuration. Any other reconcile, a silent watcher or a verification older than
``RUNTIME_RECHECK_INTERVAL`` reads everything, so a change made in the runtime is still adopted."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from fleet import queue
from fleet.models import Kyma, KymaState, ModuleConfig
from fleet.queue import StoredChange
from fleet.reconciler.run import kyma_reconcile_run
from pki import services as pki
from tests.support.runtimes import connected_kyma, keda_module, klm_watcher

pytestmark = pytest.mark.django_db

KYMAS = "kymas"
KEDAS = "kedas"


def reads_of(runtime, resource_prefix: str) -> int:
    return sum(
        n
        for (verb, resource), n in runtime.counts.snapshot().items()
        if verb in ("get", "list") and resource.startswith(resource_prefix)
    )


def heartbeat(kyma: Kyma, at: dt.datetime | None = None) -> None:
    """What the listener stores when the runtime watcher says it is alive."""
    Kyma.objects.filter(pk=kyma.pk).update(watcher_last_seen_at=at or timezone.now())


def run(kyma: Kyma, reason: str) -> Kyma:
    kyma_reconcile_run(kyma.pk, reason=reason)
    kyma.refresh_from_db()
    return kyma


@pytest.fixture
def settled(runtimes):
    """A Ready Kyma with keda reported Ready by its manager and a live runtime watcher."""
    pki.ca_bootstrap()
    klm_watcher()
    keda_module()
    runtime = runtimes()
    kyma = connected_kyma(runtime)
    heartbeat(kyma)
    run(kyma, "spec changed")
    ModuleConfig.objects.filter(kyma=kyma).update(status={"state": "Ready"})
    kyma = run(kyma, "module status reported")
    assert kyma.state == KymaState.READY
    return kyma, runtime


def test_given_a_live_watcher_when_a_periodic_reconcile_finds_nothing_to_do_then_three_reads_no_write(
    settled,
):
    kyma, runtime = settled
    before = (kyma.state, kyma.module_status, kyma.conditions)
    runtime.counts.reset()
    kyma = run(kyma, queue.PERIODIC_REASON)
    assert runtime.counts.reads <= 3
    assert runtime.counts.writes == 0
    assert reads_of(runtime, KYMAS) == 0 and reads_of(runtime, KEDAS) == 0
    assert (kyma.state, kyma.module_status, kyma.conditions) == before


def test_given_an_event_triggered_reconcile_then_the_runtime_kyma_and_module_cr_are_read(settled):
    kyma, runtime = settled
    runtime.counts.reset()
    run(kyma, "watch-event")
    assert reads_of(runtime, KYMAS) == 1 and reads_of(runtime, KEDAS) == 1
    assert runtime.counts.writes == 0


def test_given_a_kyma_edited_in_the_runtime_when_its_event_reconciles_then_the_edit_is_adopted(settled):
    kyma, runtime = settled
    runtime.edit_as_user("Kyma", "default", lambda obj: obj["spec"].update(channel="fast"), "kyma-system")
    kyma = run(kyma, "watch-event")
    assert kyma.channel == "fast"


def test_given_a_kyma_edited_when_the_recheck_interval_passed_then_a_periodic_reconcile_adopts_it(
    settled, settings
):
    kyma, runtime = settled
    runtime.edit_as_user("Kyma", "default", lambda obj: obj["spec"].update(channel="fast"), "kyma-system")
    assert run(kyma, queue.PERIODIC_REASON).channel == "regular"  # the event stands for the change
    settings.RUNTIME_RECHECK_INTERVAL = 0
    assert run(kyma, queue.PERIODIC_REASON).channel == "fast"


def test_given_a_kyma_edited_when_the_watcher_is_silent_then_a_periodic_reconcile_adopts_it(
    settled, settings
):
    kyma, runtime = settled
    runtime.edit_as_user("Kyma", "default", lambda obj: obj["spec"].update(channel="fast"), "kyma-system")
    heartbeat(kyma, timezone.now() - dt.timedelta(seconds=settings.WATCHER_SILENT_AFTER + 1))
    assert run(kyma, queue.PERIODIC_REASON).channel == "fast"


def test_given_a_periodic_reconcile_retried_then_it_reads_everything(settled):
    kyma, runtime = settled
    runtime.counts.reset()
    kyma_reconcile_run(kyma.pk, reason=queue.PERIODIC_REASON, retried=True)
    assert reads_of(runtime, KYMAS) == 1 and reads_of(runtime, KEDAS) == 1


def test_given_a_module_state_reported_when_a_periodic_reconcile_skips_the_reads_then_status_follows(settled):
    kyma, runtime = settled
    ModuleConfig.objects.filter(kyma=kyma).update(status={"state": "Warning", "message": "scaling"})
    runtime.counts.reset()
    kyma = run(kyma, queue.PERIODIC_REASON)
    assert reads_of(runtime, KYMAS) == 0 and reads_of(runtime, KEDAS) == 0
    assert kyma.state == KymaState.WARNING
    keda = kyma.module_status[0]
    assert (keda["state"], keda["resource"]["metadata"]["generation"]) == ("Warning", 1)
    live = runtime.get_object("Kyma", "default", "kyma-system")
    assert live["status"]["state"] == "Warning"  # mirrored without reading it first
    assert live["status"]["modules"][0]["state"] == "Warning"
    runtime.counts.reset()
    run(kyma, queue.PERIODIC_REASON)
    assert runtime.counts.writes == 0  # mirrored once, not again


def test_given_the_spec_changed_in_the_control_plane_when_a_periodic_reconcile_runs_then_it_pushes(settled):
    kyma, runtime = settled
    Kyma.objects.filter(pk=kyma.pk).update(channel="fast", generation=kyma.generation + 1)
    kyma.refresh_from_db()
    run(kyma, queue.PERIODIC_REASON)
    assert runtime.get_object("Kyma", "default", "kyma-system")["spec"]["channel"] == "fast"


def test_given_a_module_cr_edited_when_its_event_reconciles_then_the_cr_is_read_once(settled):
    """The reconcile first checks that the runtime stored the change its event named; it then
    uses that read instead of reading the CR again."""
    kyma, runtime = settled
    before = runtime.get_object("Keda", "default", "kyma-system")
    runtime.edit_as_user("Keda", "default", lambda obj: obj["spec"].update(replicas=3), "kyma-system")
    change = StoredChange(
        "operator.kyma-project.io/v1alpha1",
        "Keda",
        "kyma-system",
        "default",
        "UPDATE",
        before["metadata"]["uid"],
        before["metadata"]["resourceVersion"],
    )
    queue.request_one(kyma.pk, countdown=0, change=change)
    runtime.counts.reset()
    run(kyma, "watch-event")
    assert reads_of(runtime, KEDAS) == 1
    assert ModuleConfig.objects.get(kyma=kyma).spec == {"replicas": 3}
