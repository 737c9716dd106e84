"""How much a reconcile of a runtime whose watcher is alive reads (``reconciler.Scope``).

A periodic reconcile trusts the watcher's events for the runtime's Kyma and the module CRs: a
no-op reads only the watcher's own Secret, Deployment and webhook configuration. A targeted one
(every request it covers said what changed) reads only what they named. A request that did not
say (or asked for everything), a task that found no mark, a silent watcher or a verification older
than ``RUNTIME_RECHECK_INTERVAL`` reads everything, so a change made in the runtime is still
adopted."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from fleet import queue
from fleet.models import Kyma, KymaState, ModuleConfig, ReconcileRecord, SyncResource
from fleet.queue import StoredChange
from fleet.services import modules as module_services
from reconciler.run import kyma_reconcile_run
from tests.reconciler.helpers import CONFIGMAP, heartbeat, run
from tests.support.runtimes import keda_module

pytestmark = pytest.mark.django_db

KYMAS = "kymas"
KEDAS = "kedas"
DEPLOYMENTS = "deployments"


def reads_of(runtime, resource_prefix: str) -> int:
    return sum(
        n
        for (verb, resource), n in runtime.counts.snapshot().items()
        if verb in ("get", "list") and resource.startswith(resource_prefix)
    )


def event_of(runtime, kind: str, name: str) -> StoredChange:
    """The change our runtime watcher reports for an update of this object (before it)."""
    before = runtime.get_object(kind, name, "kyma-system")
    return StoredChange(
        before["apiVersion"],
        kind,
        "kyma-system",
        name,
        "UPDATE",
        before["metadata"]["uid"],
        before["metadata"]["resourceVersion"],
    )


def test_given_a_live_watcher_when_a_periodic_reconcile_finds_nothing_to_do_then_three_reads_no_write(
    settled,
):
    kyma, runtime = settled
    before = (kyma.state, kyma.module_status, kyma.conditions)
    runtime.counts.reset()
    kyma = run(kyma, queue.PERIODIC_REASON, full=False)
    assert runtime.counts.reads <= 3
    assert runtime.counts.writes == 0
    assert reads_of(runtime, KYMAS) == 0 and reads_of(runtime, KEDAS) == 0
    assert (kyma.state, kyma.module_status, kyma.conditions) == before


def test_given_an_event_that_did_not_say_what_changed_then_the_runtime_kyma_and_module_cr_are_read(settled):
    kyma, runtime = settled
    queue.request_one(kyma.pk, countdown=0)  # (upstream's watcher names no change)
    runtime.counts.reset()
    run(kyma, "watch-event", full=False)
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
    assert run(kyma, queue.PERIODIC_REASON, full=False).channel == "regular"  # its event stands for it
    settings.RUNTIME_RECHECK_INTERVAL = 0
    assert run(kyma, queue.PERIODIC_REASON, full=False).channel == "fast"


def test_given_a_kyma_edited_when_the_watcher_is_silent_then_a_periodic_reconcile_adopts_it(
    settled, settings
):
    kyma, runtime = settled
    runtime.edit_as_user("Kyma", "default", lambda obj: obj["spec"].update(channel="fast"), "kyma-system")
    heartbeat(kyma, timezone.now() - dt.timedelta(seconds=settings.WATCHER_SILENT_AFTER + 1))
    assert run(kyma, queue.PERIODIC_REASON, full=False).channel == "fast"


def test_given_a_periodic_task_that_finds_no_mark_then_it_reads_everything(settled):
    """Redelivered, or retried after it lost its mark: what it covers is unknown."""
    kyma, runtime = settled
    runtime.counts.reset()
    kyma_reconcile_run(kyma.pk, reason=queue.PERIODIC_REASON)
    assert reads_of(runtime, KYMAS) == 1 and reads_of(runtime, KEDAS) == 1


def test_given_a_module_state_reported_when_a_periodic_reconcile_skips_the_reads_then_status_follows(settled):
    kyma, runtime = settled
    ModuleConfig.objects.filter(kyma=kyma).update(status={"state": "Warning", "message": "scaling"})
    runtime.counts.reset()
    kyma = run(kyma, queue.PERIODIC_REASON, full=False)
    assert reads_of(runtime, KYMAS) == 0 and reads_of(runtime, KEDAS) == 0
    assert kyma.state == KymaState.WARNING
    keda = kyma.module_status[0]
    assert (keda["state"], keda["resource"]["metadata"]["generation"]) == ("Warning", 1)
    live = runtime.get_object("Kyma", "default", "kyma-system")
    assert live["status"]["state"] == "Warning"  # mirrored without reading it first
    assert live["status"]["modules"][0]["state"] == "Warning"
    runtime.counts.reset()
    run(kyma, queue.PERIODIC_REASON, full=False)
    assert runtime.counts.writes == 0  # mirrored once, not again


def test_given_the_spec_changed_in_the_control_plane_when_a_periodic_reconcile_runs_then_it_pushes(settled):
    kyma, runtime = settled
    Kyma.objects.filter(pk=kyma.pk).update(channel="fast", generation=kyma.generation + 1)
    kyma.refresh_from_db()
    run(kyma, queue.PERIODIC_REASON, full=False)
    assert runtime.get_object("Kyma", "default", "kyma-system")["spec"]["channel"] == "fast"


def test_given_a_module_cr_edited_when_its_event_reconciles_then_it_reads_the_cr_once_and_nothing_else(
    settled,
):
    """The reconcile first checks that the runtime stored the change its event named; it then
    uses that read instead of reading the CR again, and reads nothing its events did not name."""
    kyma, runtime = settled
    change = event_of(runtime, "Keda", "default")
    runtime.edit_as_user("Keda", "default", lambda obj: obj["spec"].update(replicas=3), "kyma-system")
    queue.request_one(kyma.pk, countdown=0, change=change)
    runtime.counts.reset()
    kyma_reconcile_run(kyma.pk, reason="watch-event")
    assert reads_of(runtime, KEDAS) == 1
    assert runtime.counts.reads == 1
    assert ModuleConfig.objects.get(kyma=kyma).spec == {"replicas": 3}


def test_given_the_runtime_kyma_edited_when_its_event_reconciles_then_the_edit_is_adopted(settled):
    kyma, runtime = settled
    change = event_of(runtime, "Kyma", "default")
    runtime.edit_as_user("Kyma", "default", lambda obj: obj["spec"].update(channel="fast"), "kyma-system")
    queue.request_one(kyma.pk, countdown=0, change=change)
    kyma_reconcile_run(kyma.pk, reason="watch-event")
    kyma.refresh_from_db()
    assert kyma.channel == "fast"


def test_given_a_targeted_reconcile_with_nothing_changed_then_it_reads_and_writes_nothing(settled):
    kyma, runtime = settled
    before = (kyma.state, kyma.module_status, kyma.conditions)
    runtime.counts.reset()
    kyma = run(kyma, "module status reported", full=False)
    assert (runtime.counts.reads, runtime.counts.writes) == (0, 0)
    assert (kyma.state, kyma.module_status, kyma.conditions) == before


def test_given_a_full_request_joins_a_targeted_mark_then_the_reconcile_reads_everything(settled):
    """A user's "reconcile now" that finds an event's task queued asks that task to read all."""
    kyma, runtime = settled
    change = event_of(runtime, "Keda", "default")
    runtime.edit_as_user("Keda", "default", lambda obj: obj["spec"].update(replicas=3), "kyma-system")
    queue.request_one(kyma.pk, countdown=0, change=change)
    runtime.counts.reset()
    run(kyma, "requested by a user", full=True)
    assert reads_of(runtime, KYMAS) == 1
    assert reads_of(runtime, DEPLOYMENTS) == 1  # the runtime watcher's own


def test_given_the_watcher_was_not_ready_when_a_targeted_reconcile_runs_then_it_reads_the_watcher(settled):
    kyma, runtime = settled
    conditions = [
        {**c, "status": "False", "reason": "WatcherNotReady"} if c["type"] == "SKRWebhook" else c
        for c in kyma.conditions
    ]
    Kyma.objects.filter(pk=kyma.pk).update(conditions=conditions)
    runtime.counts.reset()
    kyma = run(kyma, "module status reported", full=False)
    assert reads_of(runtime, DEPLOYMENTS) == 1
    webhook = next(c for c in kyma.conditions if c["type"] == "SKRWebhook")
    assert (webhook["status"], webhook["reason"]) == ("True", "Ready")


def sync_resource(kyma: Kyma, name: str, *levels: str) -> None:
    """A module manager's SyncResource: one ConfigMap per level, ``<name>-0``, ``<name>-1``..."""
    manifests = "---\n".join(
        CONFIGMAP.format(name=f"{name}-{n}", level=level) for n, level in enumerate(levels)
    )
    module_services.syncresource_apply(kyma=kyma, module=keda_module(), name=name, manifests=manifests)


def level(runtime, name: str) -> str | None:
    found = runtime.get_object("ConfigMap", name, "kyma-system")
    return found and found["data"]["level"]


@pytest.fixture
def synced(settled):
    """``settled``, with two SyncResources applied."""
    kyma, runtime = settled
    sync_resource(kyma, "one", "a", "b")
    sync_resource(kyma, "two", "c")
    kyma = run(kyma, "sync resource changed", full=False)
    assert (level(runtime, "one-1"), level(runtime, "two-0")) == ("b", "c")
    return kyma, runtime


def test_given_a_sync_resource_changed_when_its_reconcile_runs_then_only_it_is_applied_without_reads(synced):
    kyma, runtime = synced
    sync_resource(kyma, "one", "a2", "b2")
    runtime.counts.reset()
    run(kyma, "sync resource one changed", full=False)
    assert (level(runtime, "one-0"), level(runtime, "one-1")) == ("a2", "b2")
    assert reads_of(runtime, "configmaps") == 0  # applied at once: their content changed
    assert runtime.counts.reads == 0 and runtime.counts.writes == 2
    statuses = {r.name: r.manifest_status for r in SyncResource.objects.filter(kyma=kyma)}
    assert [entry["state"] for entry in statuses["one"]] == ["Applied", "Applied"]


def test_given_drift_in_a_settled_sync_resource_then_a_targeted_reconcile_leaves_it_to_the_periodic_one(
    synced,
):
    kyma, runtime = synced
    runtime.edit_as_user("ConfigMap", "two-0", lambda obj: obj["data"].update(level="edited"), "kyma-system")
    run(kyma, "module status reported", full=False)
    assert level(runtime, "two-0") == "edited"
    run(kyma, queue.PERIODIC_REASON, full=False)
    assert level(runtime, "two-0") == "c"
    assert ReconcileRecord.objects.filter(kyma=kyma).latest("started_at").drift_corrected == [
        {"kind": "ConfigMap", "namespace": "kyma-system", "name": "two-0"}
    ]


def test_given_an_object_deleted_in_the_runtime_when_its_manifest_changes_then_it_is_created_as_drift(synced):
    kyma, runtime = synced
    runtime.delete_as_user("ConfigMap", "one-0", "kyma-system")
    sync_resource(kyma, "one", "a2", "b")
    run(kyma, "sync resource one changed", full=False)
    assert level(runtime, "one-0") == "a2"
    record = ReconcileRecord.objects.filter(kyma=kyma).latest("started_at")
    assert record.drift_corrected == [{"kind": "ConfigMap", "namespace": "kyma-system", "name": "one-0"}]
