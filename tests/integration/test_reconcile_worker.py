"""Reconciles through a real Celery worker process against emulated runtimes."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable

import pytest

from fleet.models import Kyma, ModuleConfig, ReconcileRecord, SyncResource
from fleet.queue.requests import kyma_reconcile_request
from fleet.services import kymas as kyma_services
from fleet.services import modules as module_services
from pki import services as pki
from tests.support.processes import start_worker
from tests.support.runtimes import connected_kyma, keda_module, klm_watcher
from watchers.rendering import OWNED_OBJECTS_WEBHOOK
from watchers.services import watcher_apply

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def eventually(check: Callable[[], bool], what: str, timeout: float = 30, worker=None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise AssertionError(f"{what} did not happen in {timeout}s" + (f"\n{worker.output()}" if worker else ""))


@pytest.fixture(scope="module")
def worker(django_db_setup, django_db_blocker):
    # prefork here: a pool process can die alone (a killed threads worker dies whole: the last test
    # here, and tests/integration/test_drift.py runs on threads)
    proc = start_worker(concurrency=2, pool="prefork", RECONCILE_LEASE_SECONDS="3")
    yield proc
    proc.stop()


@pytest.fixture(autouse=True)
def catalog():
    pki.ca_bootstrap()
    klm_watcher()
    return keda_module()


def synced_into(runtime) -> bool:
    """The runtime has its Kyma (a first reconcile may fail part-way; a later one syncs it)."""
    try:
        return runtime.get_object("Kyma", "default", "kyma-system") is not None
    except LookupError:  # its CRD is not installed yet
        return False


def ready(kyma: Kyma) -> bool:
    config = ModuleConfig.objects.filter(kyma_id=kyma.pk).first()
    if config is not None and config.status.get("state") != "Ready":
        module_services.moduleconfig_set_status(config=config, status={"state": "Ready"})
    return Kyma.objects.filter(pk=kyma.pk, state="Ready").exists()


def test_given_a_new_kyma_when_the_worker_reconciles_then_it_becomes_ready(worker, runtimes):
    runtime = runtimes()
    kyma = connected_kyma(runtime)
    eventually(lambda: ready(kyma), "Kyma Ready", worker=worker)
    assert runtime.get_object("validatingwebhookconfigurations", "skr-webhook") is not None
    assert runtime.get_object("Keda", "default", "kyma-system") is not None


def test_given_a_user_edit_in_the_runtime_when_a_reconcile_runs_then_the_copy_follows(worker, runtimes):
    runtime = runtimes()
    kyma = connected_kyma(runtime)
    eventually(lambda: synced_into(runtime), "the runtime's Kyma", worker=worker)
    runtime.edit_as_user("Kyma", "default", lambda obj: obj["spec"].update(channel="fast"), "kyma-system")
    kyma_reconcile_request([kyma.pk], reason="test")
    eventually(
        lambda: Kyma.objects.get(pk=kyma.pk).channel == "fast", "control plane copy follows", worker=worker
    )


def test_given_a_changed_watcher_when_fanned_out_then_every_runtime_follows(worker, runtimes):
    pairs = [(rt := runtimes(), connected_kyma(rt, name=f"fan-{i}")) for i in range(3)]
    eventually(lambda: all(Kyma.objects.get(pk=k.pk).last_reconcile_at for _, k in pairs), "first reconciles")
    watcher_apply(
        namespace="kcp-system",
        name="keda-watcher",
        manager="keda-manager",
        resource_to_watch={"group": "operator.kyma-project.io", "version": "*", "resource": "kedas"},
        service_info={"name": "keda-events", "namespace": "kcp-system", "port": 9090},
    )

    def all_have_two_webhooks() -> bool:
        for runtime, _ in pairs:
            config = runtime.get_object("validatingwebhookconfigurations", "skr-webhook") or {"webhooks": []}
            # one webhook per Watcher (klm-watcher, keda-watcher) beside the one for owned objects
            if len([w for w in config["webhooks"] if w["name"] != OWNED_OBJECTS_WEBHOOK]) != 2:
                return False
        return True

    eventually(all_have_two_webhooks, "every runtime has both webhooks", worker=worker)


def test_given_sync_resource_changes_when_reconciled_then_applied_updated_pruned(worker, runtimes):
    runtime = runtimes()
    kyma = connected_kyma(runtime)
    manifest = (
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, namespace: kyma-system}}\n"
        "data: {{v: '{v}'}}\n"
    )
    module_services.syncresource_apply(
        kyma=kyma,
        module=keda_module(),
        name="s",
        manifests=manifest.format(name="a", v=1) + "---\n" + manifest.format(name="b", v=1),
    )
    eventually(
        lambda: runtime.get_object("ConfigMap", "b", "kyma-system") is not None, "applied", worker=worker
    )
    module_services.syncresource_apply(
        kyma=kyma, module=keda_module(), name="s", manifests=manifest.format(name="a", v=2)
    )
    eventually(
        lambda: (
            runtime.get_object("ConfigMap", "b", "kyma-system") is None
            and (runtime.get_object("ConfigMap", "a", "kyma-system") or {}).get("data") == {"v": "2"}
        ),
        "updated and pruned",
        worker=worker,
    )
    # The runtime changes before the reconcile writes the status: wait for the status itself.
    eventually(
        lambda: [e["name"] for e in SyncResource.objects.get().manifest_status] == ["a"],
        "the stored status lists only the remaining manifest",
        worker=worker,
    )


def test_given_an_unreachable_runtime_then_error_while_another_kyma_stays_ready(worker, runtimes):
    down, up = runtimes(), runtimes()
    broken, healthy = connected_kyma(down, name="broken"), connected_kyma(up, name="healthy")
    eventually(
        lambda: ready(healthy) and Kyma.objects.get(pk=broken.pk).last_reconcile_at, "first reconciles"
    )
    down.set_reachable(False)
    kyma_reconcile_request([broken.pk, healthy.pk], reason="test")
    eventually(lambda: Kyma.objects.get(pk=broken.pk).state == "Error", "Error state", worker=worker)
    broken.refresh_from_db()
    assert broken.error_streak >= 1 and broken.next_reconcile_at > broken.last_reconcile_at
    assert Kyma.objects.get(pk=healthy.pk).state == "Ready"
    down.set_reachable(True)


def test_given_the_pool_process_killed_mid_reconcile_then_the_reconcile_still_completes(worker, runtimes):
    runtime = runtimes()
    runtime.faults.latency = 0.4  # each runtime call is slow: the reconcile is in flight for seconds
    kyma = connected_kyma(runtime)
    eventually(
        lambda: Kyma.objects.get(pk=kyma.pk).lease_owner != "", "a reconcile holds the lease", worker=worker
    )
    holder = int(Kyma.objects.get(pk=kyma.pk).lease_owner.split(":")[1])  # host:pid:thread
    os.kill(holder, signal.SIGKILL)  # the process running the reconcile dies (OOM kill, say)
    runtime.faults.latency = 0
    eventually(
        lambda: ReconcileRecord.objects.filter(kyma_id=kyma.pk).exists(),
        "the reconcile completed",
        timeout=60,
        worker=worker,
    )
    # the interrupted work is finished (the first reconcile after the kill may still fail on what
    # the killed one left half done; the next one then completes it)
    eventually(lambda: synced_into(runtime), "the runtime's Kyma", timeout=30, worker=worker)
    assert worker.proc.poll() is None


def test_given_the_whole_worker_killed_mid_reconcile_then_a_new_worker_completes_it(
    django_db_blocker, runtimes
):
    from fleet.tasks import reconcile_due

    first = start_worker(concurrency=1, RECONCILE_LEASE_SECONDS="2")
    runtime = runtimes()
    runtime.faults.latency = 0.4
    kyma = connected_kyma(runtime)
    try:
        eventually(
            lambda: Kyma.objects.get(pk=kyma.pk).lease_owner != "",
            "a reconcile holds the lease",
            worker=first,
        )
    finally:
        first.signal(signal.SIGKILL)  # the node goes away: no ack, no cleanup
        first.proc.wait(10)
    runtime.faults.latency = 0
    second = start_worker(concurrency=1, RECONCILE_LEASE_SECONDS="2")
    try:
        # Beat's sweep finds the Kyma still due and queues it again; the dead lease expires.
        eventually(
            lambda: reconcile_due() >= 0 and ReconcileRecord.objects.filter(kyma_id=kyma.pk).exists(),
            "the reconcile completed on the new worker",
            timeout=60,
            worker=second,
        )
    finally:
        second.stop()


def test_given_a_deleted_kyma_when_reconciled_then_the_runtime_is_clean_and_the_row_gone(worker, runtimes):
    runtime = runtimes()
    kyma = connected_kyma(runtime)
    eventually(lambda: synced_into(runtime), "the runtime's Kyma", worker=worker)
    kyma_services.kyma_delete(kyma=Kyma.objects.get(pk=kyma.pk))
    eventually(lambda: not Kyma.objects.filter(pk=kyma.pk).exists(), "row deleted", worker=worker)
    assert runtime.get_object("Kyma", "default", "kyma-system") is None
    assert runtime.get_object("validatingwebhookconfigurations", "skr-webhook") is None
