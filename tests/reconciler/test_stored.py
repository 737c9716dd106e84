"""Before reading, a reconcile checks the runtime stored the changes its events named (bounded)."""

from __future__ import annotations

import pytest

from fleet import queue
from fleet.k8s.client import client_for
from fleet.models import ReconcileRecord
from fleet.queue import StoredChange
from pki import services as pki
from reconciler.stored import changes_stored
from tests.reconciler.helpers import reconcile
from tests.support.runtimes import connected_kyma, klm_watcher

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def kyma_in_runtime(runtimes):
    pki.ca_bootstrap()
    klm_watcher()
    runtime = runtimes()
    kyma = connected_kyma(runtime, modules=[])
    reconcile(kyma)  # the runtime's Kyma exists now
    live = runtime.get_object("Kyma", "default", "kyma-system")
    return kyma, live["metadata"]


def kyma_change(metadata: dict, old_version: str) -> StoredChange:
    return StoredChange(
        "operator.kyma-project.io/v1beta2",
        "Kyma",
        "kyma-system",
        "default",
        "UPDATE",
        metadata["uid"],
        old_version,
    )


def test_given_a_change_already_stored_then_one_read_says_so(kyma_in_runtime):
    kyma, metadata = kyma_in_runtime
    client = client_for(kyma.pk, kyma.kubeconfig)
    client.reset_counts()
    assert changes_stored(client, [kyma_change(metadata, "1")], bound=5, fallback=5) is True
    assert client.counts.reads == 1


def test_given_a_change_never_stored_then_the_wait_ends_at_its_bound(kyma_in_runtime):
    kyma, metadata = kyma_in_runtime
    client = client_for(kyma.pk, kyma.kubeconfig)
    client.reset_counts()
    rejected = kyma_change(metadata, metadata["resourceVersion"])  # the version it never left
    assert changes_stored(client, [rejected], bound=0.2, fallback=0) is False
    assert client.counts.reads > 1  # it kept looking until the bound


def test_given_a_kind_the_runtime_does_not_serve_then_the_fixed_delay_instead(kyma_in_runtime):
    kyma, _ = kyma_in_runtime
    client = client_for(kyma.pk, kyma.kubeconfig)
    unknown = StoredChange("example.com/v1", "Nothing", "ns", "x", "UPDATE", "u", "1")
    assert changes_stored(client, [unknown], bound=5, fallback=0.05) is True


def test_given_a_queued_change_that_is_never_stored_then_the_reconcile_still_runs(kyma_in_runtime, settings):
    settings.RECONCILE_STORED_WAIT = 0.2
    kyma, metadata = kyma_in_runtime
    before = ReconcileRecord.objects.filter(kyma_id=kyma.pk).count()
    queue.request_one(kyma.pk, countdown=0, change=kyma_change(metadata, metadata["resourceVersion"]))
    reconcile(kyma)
    assert ReconcileRecord.objects.filter(kyma_id=kyma.pk).count() == before + 1
