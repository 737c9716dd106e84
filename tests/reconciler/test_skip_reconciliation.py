"""The label ``operator.kyma-project.io/skip-reconciliation: "true"`` pauses a Kyma (upstream's
rule): its reconciles leave the runtime alone and say why, sweeps pass it by, removing the label
resumes it, and deleting it still cleans the runtime up."""

from __future__ import annotations

import datetime as dt

import pytest
from django.urls import reverse
from django.utils import timezone

from fleet import selectors
from fleet.models import Kyma
from fleet.services import kymas as kyma_services
from pki import services as pki
from tests.reconciler.helpers import reconcile
from tests.support.runtimes import connected_kyma, keda_module, klm_watcher

pytestmark = pytest.mark.django_db

SKIP = {"operator.kyma-project.io/skip-reconciliation": "true"}


@pytest.fixture(autouse=True)
def catalog():
    pki.ca_bootstrap()
    klm_watcher()
    return keda_module()


def relabel(kyma: Kyma, labels: dict, **changes: object) -> Kyma:
    fields = {
        "runtime_id": kyma.runtime_id,
        "skr_domain": kyma.skr_domain,
        "modules": kyma.modules,
        "labels": labels,
        **changes,
    }
    kyma, _ = kyma_services.kyma_apply(namespace=kyma.namespace, name=kyma.name, **fields)
    kyma.refresh_from_db()
    return kyma


def test_given_a_labelled_kyma_when_reconciled_then_the_runtime_is_not_called(runtimes):
    runtime = runtimes()
    kyma = connected_kyma(runtime, labels=SKIP)
    before = runtime.counts.total
    record = reconcile(kyma)
    assert runtime.counts.total == before
    assert runtime.get_object("v1/namespaces", "kyma-system") is None
    assert record.runtime_writes == 0
    assert "paused" in record.message and "skip-reconciliation" in record.message
    assert kyma.finalizers == []  # nothing was put into the runtime, so nothing to clean up


def test_given_a_reconciled_kyma_when_labelled_then_spec_changes_wait_until_the_label_goes(
    runtimes, task_queue, django_capture_on_commit_callbacks
):
    runtime = runtimes()
    kyma = connected_kyma(runtime)
    reconcile(kyma)
    assert runtime.get_object("Kyma", "default", "kyma-system")["spec"]["channel"] == "regular"
    kyma = relabel(kyma, SKIP, channel="fast")
    reconcile(kyma)
    before = runtime.counts.total
    reconcile(kyma)
    assert runtime.counts.total == before
    assert runtime.get_object("Kyma", "default", "kyma-system")["spec"]["channel"] == "regular"

    task_queue()
    with django_capture_on_commit_callbacks(execute=True):
        kyma = relabel(kyma, {}, channel="fast")
    assert [task.args for task in task_queue()] == [[kyma.pk]]  # the label's removal asks for a reconcile
    record = reconcile(kyma)
    assert "paused" not in record.message
    assert runtime.counts.total > before
    assert runtime.get_object("Kyma", "default", "kyma-system")["spec"]["channel"] == "fast"


def test_given_a_labelled_kyma_when_deleted_then_the_runtime_is_still_cleaned_up(runtimes):
    runtime = runtimes()
    kyma = connected_kyma(runtime)
    reconcile(kyma)
    kyma = relabel(kyma, SKIP)
    assert kyma_services.kyma_delete(kyma=kyma) is False
    assert reconcile(Kyma.objects.get(pk=kyma.pk)) is None
    assert not Kyma.objects.filter(pk=kyma.pk).exists()
    for resource, name, namespace in [
        ("Deployment", "skr-webhook", "kyma-system"),
        ("Kyma", "default", "kyma-system"),
        ("Keda", "default", "kyma-system"),
    ]:
        assert runtime.get_object(resource, name, namespace) is None, resource


def test_given_due_kymas_when_sweeping_then_labelled_ones_are_passed_by(runtimes):
    past = timezone.now() - dt.timedelta(minutes=1)
    paused = connected_kyma(runtimes(), name="paused", labels=SKIP)
    other = connected_kyma(
        runtimes(), name="other", labels={"operator.kyma-project.io/skip-reconciliation": "false"}
    )
    unlabelled = connected_kyma(runtimes(), name="plain")
    Kyma.objects.update(next_reconcile_at=past)
    due = [kyma_id for batch in selectors.kyma_ids_due(limit=100) for kyma_id in batch]
    assert other.pk in due and unlabelled.pk in due and paused.pk not in due


def test_given_a_labelled_kyma_when_opening_its_page_then_it_says_paused(runtimes, admin_client):
    kyma = connected_kyma(runtimes(), labels=SKIP)
    reconcile(kyma)
    url = reverse("admin:controlplane_kyma_change", args=[kyma.pk])
    html = admin_client.get(url).content.decode()
    assert 'id="cp-paused"' in html and "Paused: skip-reconciliation" in html
    resumed = relabel(kyma, {})
    assert "Paused: skip-reconciliation" not in admin_client.get(url).content.decode()
    assert resumed.pk == kyma.pk
