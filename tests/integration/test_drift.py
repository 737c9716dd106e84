"""Drift correction and concurrent reconciles, through a real Celery worker on the threads pool.

Each drift case changes, inside an emulated runtime, an object the control plane manages (while it
keeps our content-hash annotation); the next reconcile must put it back, record the correction
and count it. A reconcile that finds no drift writes nothing. Many reconciles of one Kyma at once
(published directly, past the coalescing) never overlap.
"""

from __future__ import annotations

import base64
import itertools
import time
from collections.abc import Callable

import pytest
from celery import current_app
from django.utils import timezone

from fleet.models import DriftCount, Kyma, ModuleConfig, ReconcileRecord, ReconcileState
from fleet.queue.requests import RECONCILE_TASK, kyma_reconcile_request, reconcile_queued
from fleet.services import modules as module_services
from pki import services as pki
from tests.support.processes import start_worker
from tests.support.runtimes import connected_kyma, keda_module, klm_watcher

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

MANIFEST = (
    "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: drift-me, namespace: kyma-system}\ndata: {v: '1'}\n"
)
WEBHOOK_CONFIG = "validatingwebhookconfigurations"


def eventually(check: Callable[[], object], what: str, worker, timeout: float = 45) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"{what} did not happen in {timeout}s\n{worker.output()}")


@pytest.fixture(scope="module")
def worker(django_db_setup, django_db_blocker):
    proc = start_worker(concurrency=4, pool="threads", RECONCILE_LEASE_SECONDS="5", RECONCILE_MIN_SPACING="0")
    yield proc
    proc.stop()


@pytest.fixture(autouse=True)
def catalog():
    pki.ca_bootstrap()
    klm_watcher()
    return keda_module()


def last_record_id(kyma: Kyma) -> int:
    return ReconcileRecord.objects.filter(kyma=kyma).order_by("-pk").values_list("pk", flat=True).first() or 0


def reconcile_once(kyma: Kyma, worker) -> ReconcileRecord:
    """Request a reconcile and wait for the record of one that started after the request (a
    reconcile queued earlier, e.g. for the Kyma's kubeconfig, may start just before it and finish
    just after: it read the runtime too early to count)."""
    since, requested = last_record_id(kyma), timezone.now()
    kyma_reconcile_request([kyma.pk], reason="test")
    return eventually(
        lambda: (
            ReconcileRecord.objects.filter(kyma=kyma, pk__gt=since, started_at__gte=requested)
            .order_by("pk")
            .first()
        ),
        "a reconcile",
        worker,
    )


def correction(kyma: Kyma, since: int, kind: str) -> ReconcileRecord | None:
    """The first reconcile after record ``since`` that corrected drift of a ``kind``."""
    for record in ReconcileRecord.objects.filter(kyma=kyma, pk__gt=since).order_by("pk"):
        if kind in [d["kind"] for d in record.drift_corrected]:
            return record
    return None


def in_steady_state(kyma: Kyma, worker) -> None:
    """Reconcile until one finds nothing to do (the module reports Ready; everything applied)."""

    def settled() -> bool:
        config = ModuleConfig.objects.filter(kyma_id=kyma.pk).first()
        if config is not None and config.status.get("state") != "Ready":
            module_services.moduleconfig_set_status(config=config, status={"state": "Ready"})
        record = reconcile_once(kyma, worker)
        return record.runtime_writes == 0 and record.state == "Ready"

    eventually(settled, "a reconcile without writes", worker, timeout=90)


@pytest.fixture
def synced(runtimes, worker):
    """A runtime in steady state: the watcher's resources and a synced manifest in place."""
    runtime = runtimes()
    kyma = connected_kyma(runtime)
    module_services.syncresource_apply(kyma=kyma, module=keda_module(), name="s", manifests=MANIFEST)
    in_steady_state(kyma, worker)
    return runtime, kyma


def edit_manifest(runtime) -> None:
    runtime.edit_as_user("ConfigMap", "drift-me", lambda obj: obj["data"].update(v="edited"), "kyma-system")


def delete_manifest(runtime) -> None:
    runtime.delete_as_user("ConfigMap", "drift-me", "kyma-system")


def scale_watcher_to_zero(runtime) -> None:
    runtime.patch_as_user("Deployment", "skr-webhook", {"spec": {"replicas": 0}}, "kyma-system")


WEBHOOKS_BEFORE: dict[int, list[str]] = {}  # runtime -> the webhook names the reconcile put there


def remove_a_webhook(runtime) -> None:
    live = runtime.get_object(WEBHOOK_CONFIG, "skr-webhook")
    WEBHOOKS_BEFORE[id(runtime)] = [hook["name"] for hook in live["webhooks"]]
    runtime.edit_as_user(WEBHOOK_CONFIG, "skr-webhook", lambda obj: obj.update(webhooks=obj["webhooks"][1:]))


def change_secret_data(runtime) -> None:
    forged = base64.b64encode(b"not our certificate").decode()
    runtime.edit_as_user(
        "Secret", "skr-webhook-tls", lambda obj: obj["data"].update({"tls.crt": forged}), "kyma-system"
    )


def manifest_restored(runtime) -> bool:
    live = runtime.get_object("ConfigMap", "drift-me", "kyma-system")
    return live is not None and live["data"] == {"v": "1"}


def watcher_scaled_back(runtime) -> bool:
    return runtime.get_object("Deployment", "skr-webhook", "kyma-system")["spec"]["replicas"] == 1


def webhooks_back(runtime) -> bool:
    names = [hook["name"] for hook in runtime.get_object(WEBHOOK_CONFIG, "skr-webhook")["webhooks"]]
    return sorted(names) == sorted(WEBHOOKS_BEFORE[id(runtime)])


def secret_restored(runtime) -> bool:
    data = runtime.get_object("Secret", "skr-webhook-tls", "kyma-system")["data"]
    return base64.b64decode(data["tls.crt"]).startswith(b"-----BEGIN CERTIFICATE-----")


@pytest.mark.parametrize(
    ("drift", "kind", "restored"),
    [
        (edit_manifest, "ConfigMap", manifest_restored),
        (delete_manifest, "ConfigMap", manifest_restored),
        (scale_watcher_to_zero, "Deployment", watcher_scaled_back),
        (remove_a_webhook, "ValidatingWebhookConfiguration", webhooks_back),
        (change_secret_data, "Secret", secret_restored),
    ],
    ids=["manifest-edited", "manifest-deleted", "watcher-scaled-to-0", "webhook-removed", "secret-changed"],
)
def test_given_drift_in_the_runtime_when_the_next_reconcile_runs_then_it_is_corrected(
    synced, worker, drift, kind, restored
):
    runtime, kyma = synced
    counted = dict(DriftCount.objects.values_list("kind", "total"))
    since, drifted_at = last_record_id(kyma), timezone.now()
    drift(runtime)
    assert not restored(runtime)

    kyma_reconcile_request([kyma.pk], reason="test")
    record = eventually(lambda: correction(kyma, since, kind), f"the {kind} corrected", worker)

    # The first reconcile that read the runtime after the drift corrected it: every one recorded
    # before it had started earlier (e.g. one queued for the Kyma's kubeconfig, just then running).
    earlier = ReconcileRecord.objects.filter(kyma=kyma, pk__gt=since, pk__lt=record.pk)
    assert all(r.started_at < drifted_at for r in earlier), list(earlier.values("started_at", "reason"))
    assert restored(runtime), worker.output()
    assert record.runtime_writes >= 1
    assert kind in [d["kind"] for d in record.drift_corrected]
    assert DriftCount.objects.get(kind=kind).total == counted.get(kind, 0) + 1
    # and the reconcile after it finds nothing left to do
    after = reconcile_once(kyma, worker)
    assert (after.runtime_writes, after.drift_corrected) == (0, [])


def test_given_no_drift_when_reconciled_then_nothing_is_written(synced, worker):
    runtime, kyma = synced
    runtime.counts.reset()

    record = reconcile_once(kyma, worker)

    assert record.runtime_writes == 0 and record.drift_corrected == []
    assert runtime.counts.writes == 0, runtime.counts.snapshot()


def test_given_a_module_cr_edited_by_the_user_then_its_spec_is_never_corrected(synced, worker):
    runtime, kyma = synced
    runtime.edit_as_user("Keda", "default", lambda obj: obj["spec"].update(replicas=3), "kyma-system")

    record = reconcile_once(kyma, worker)

    assert runtime.get_object("Keda", "default", "kyma-system")["spec"]["replicas"] == 3
    assert record.drift_corrected == []
    assert ModuleConfig.objects.get(kyma=kyma).spec == {"replicas": 3}  # the manager learns it


def test_given_many_reconciles_of_one_kyma_at_once_then_they_never_overlap(synced, worker):
    runtime, kyma = synced
    runtime.faults.latency = 0.05  # each reconcile spends a while on the network
    since = last_record_id(kyma)
    try:
        for _ in range(8):  # past the coalescing: eight tasks for one Kyma, four threads to run them
            current_app.send_task(RECONCILE_TASK, args=[kyma.pk], kwargs={"reason": "test"})
        # Tasks that find the lease taken re-arm the Kyma's mark once and retry (the others join
        # that retry): done when two reconciles ran, no lease is held and nothing is queued.
        eventually(
            lambda: (
                ReconcileRecord.objects.filter(kyma=kyma, pk__gt=since).count() >= 2
                and not ReconcileState.objects.filter(kyma_id=kyma.pk).exclude(lease_owner="").exists()
                and not reconcile_queued([kyma.pk])
            ),
            "the tasks ran or joined one that ran",
            worker,
            timeout=90,
        )
    finally:
        runtime.faults.latency = 0
    records = list(ReconcileRecord.objects.filter(kyma=kyma, pk__gt=since))
    assert len(records) >= 2
    spans = sorted(
        (r.started_at.timestamp(), r.started_at.timestamp() + r.duration_ms / 1000) for r in records
    )
    for (_, end), (start, _) in itertools.pairwise(spans):
        assert start >= end - 0.02, f"two reconciles of one Kyma overlapped: {spans}"
