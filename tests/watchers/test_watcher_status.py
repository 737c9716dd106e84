"""A Watcher's status says whether its webhook reached every reachable runtime (from the database)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from django.conf import settings
from django.db import connection
from django.test.utils import CaptureQueriesContext
from jsonschema import Draft202012Validator, FormatChecker

from pki import services as pki
from tests.factories import KymaFactory
from tests.reconciler.helpers import reconcile
from tests.support.runtimes import KLM, connected_kyma, keda_module
from watchers.models import Watcher
from watchers.rendering import MODULE_CRS_WEBHOOK
from watchers.resources import WatcherKind
from watchers.services import watcher_apply, watcher_delete
from watchers.status import CONDITION, watchers_status_refresh
from watchers.tasks import status_refresh

pytestmark = pytest.mark.django_db

UPSTREAM_CRD = Path("/work/shared/upstream/crds/operator.kyma-project.io_watchers.yaml")
KEDA = {
    "namespace": "kcp-system",
    "name": "keda-watcher",
    "manager": "keda-manager",
    "resource_to_watch": {"group": "operator.kyma-project.io", "version": "v1alpha1", "resource": "kedas"},
    "service_info": {"name": "keda-events", "namespace": "kcp-system", "port": 9090},
}


def rollout(watcher: Watcher) -> dict:
    watcher.refresh_from_db()
    return next(c for c in watcher.conditions if c["type"] == CONDITION)


def webhooks(runtime) -> list[str]:
    config = runtime.get_object("validatingwebhookconfigurations", "skr-webhook")
    return [w["name"] for w in config["webhooks"] if w["name"] != MODULE_CRS_WEBHOOK]


def upstream_status_schema() -> dict:
    crd = yaml.safe_load(UPSTREAM_CRD.read_text())
    served = next(v for v in crd["spec"]["versions"] if v["name"] == "v1beta2")
    return served["schema"]["openAPIV3Schema"]["properties"]["status"]


def assert_upstream_valid(watcher: Watcher) -> None:
    status = WatcherKind().to_document(watcher)["status"]
    validator = Draft202012Validator(upstream_status_schema(), format_checker=FormatChecker())
    assert [e.message for e in validator.iter_errors(status)] == []


@pytest.fixture
def catalog():
    pki.ca_bootstrap()
    return keda_module()


class TestRollingOut:
    def test_given_runtimes_not_reconciled_when_a_watcher_is_created_then_it_is_processing_in_0_of_m(self):
        KymaFactory.create_batch(3)
        watcher, _ = watcher_apply(**KEDA)
        assert watcher.state == "Processing"
        condition = rollout(watcher)
        assert (condition["status"], condition["reason"]) == ("False", "RollingOut")
        assert "in 0 of 3 runtimes" in condition["message"]
        assert watcher.observed_generation == watcher.generation == 1

    def test_given_every_runtime_reconciled_when_refreshed_then_ready_at_the_current_generation(
        self, runtimes, catalog
    ):
        kymas = [connected_kyma(runtimes(), name=f"k{i}") for i in range(2)]
        watcher, _ = watcher_apply(**KEDA)
        reconcile(kymas[0])
        watchers_status_refresh()
        assert "in 1 of 2 runtimes" in rollout(watcher)["message"]
        assert watcher.state == "Processing"
        reconcile(kymas[1])
        assert status_refresh() == 1  # the beat task: one Watcher's status changed
        condition = rollout(watcher)
        assert watcher.state == "Ready"
        assert (condition["status"], condition["reason"]) == ("True", "RolledOut")
        assert "in 2 of 2 runtimes" in condition["message"]
        assert watcher.observed_generation == watcher.generation == condition["observedGeneration"]
        assert_upstream_valid(watcher)

    def test_given_a_ready_watcher_when_its_spec_changes_then_processing_until_every_runtime_has_it(
        self, runtimes, catalog
    ):
        kyma = connected_kyma(runtimes())
        watcher, _ = watcher_apply(**KEDA)
        reconcile(kyma)
        watchers_status_refresh()
        watcher.refresh_from_db()
        assert watcher.state == "Ready"
        watcher, _ = watcher_apply(**{**KEDA, "field": "status"})
        assert watcher.generation == 2
        assert watcher.state == "Processing"
        assert "in 0 of 1 runtimes" in rollout(watcher)["message"]
        reconcile(kyma)
        watchers_status_refresh()
        watcher.refresh_from_db()
        assert (watcher.state, watcher.observed_generation) == ("Ready", 2)

    def test_given_an_unreachable_runtime_then_it_is_not_counted(self, runtimes, catalog):
        reachable = connected_kyma(runtimes())
        without_kubeconfig = KymaFactory()
        watcher, _ = watcher_apply(**KEDA)
        assert "in 0 of 2 runtimes" in rollout(watcher)["message"]
        reconcile(reachable)
        reconcile(without_kubeconfig)
        watchers_status_refresh()
        assert "in 1 of 1 runtimes" in rollout(watcher)["message"]
        assert watcher.state == "Ready"

    def test_given_a_bigger_fleet_then_the_refresh_costs_the_same_queries(self):
        watcher_apply(**KEDA)
        watcher_apply(**KLM)
        KymaFactory.create_batch(2)
        Watcher.objects.update(state="", conditions=[])
        with CaptureQueriesContext(connection) as small:
            watchers_status_refresh()
        KymaFactory.create_batch(40)
        Watcher.objects.update(state="", conditions=[])
        with CaptureQueriesContext(connection) as big:
            watchers_status_refresh()
        assert len(big) == len(small)


class TestUnrenderable:
    def test_given_a_name_too_long_for_a_webhook_then_error_with_the_reason(self):
        KymaFactory()
        watcher, _ = watcher_apply(**{**KEDA, "name": ".".join(c * 63 for c in "wxy") + "." + "z" * 40})
        assert watcher.state == "Error"
        condition = rollout(watcher)
        assert (condition["status"], condition["reason"]) == ("False", "InvalidConfiguration")
        assert "longer than 253" in condition["message"]
        assert_upstream_valid(watcher)

    def test_given_a_stored_bad_label_selector_then_error_and_the_runtimes_still_get_the_others(
        self, runtimes, catalog
    ):
        runtime = runtimes()
        kyma = connected_kyma(runtime)
        watcher_apply(**KEDA)
        bad, _ = watcher_apply(**{**KEDA, "name": "bad", "manager": "bad-manager"})
        Watcher.objects.filter(pk=bad.pk).update(labels_to_watch={"not a label key!": "x"})
        reconcile(kyma)
        watchers_status_refresh()
        bad.refresh_from_db()
        assert bad.state == "Error"
        assert "labelsToWatch" in rollout(bad)["message"]
        assert kyma.state != "Error"
        assert webhooks(runtime) == ["kcp-system.keda-watcher.operator.kyma-project.io"]
        assert Watcher.objects.get(name="keda-watcher").state == "Ready"

    def test_given_a_stored_row_without_component_then_error_naming_it(self):
        watcher, _ = watcher_apply(**KEDA)
        Watcher.objects.filter(pk=watcher.pk).update(component="")
        watchers_status_refresh()
        watcher.refresh_from_db()
        assert watcher.state == "Error"
        assert "component ''" in rollout(watcher)["message"]


class TestOtherStates:
    def test_given_a_deleting_watcher_when_refreshed_then_it_stays_deleting(self):
        KymaFactory()
        watcher, _ = watcher_apply(**KEDA)
        Watcher.objects.filter(pk=watcher.pk).update(finalizers=["controlplane.kyma-project.io/runtimes"])
        watcher.refresh_from_db()
        watcher_delete(watcher=watcher)
        watchers_status_refresh()
        watcher.refresh_from_db()
        assert watcher.state == "Deleting"
        assert_upstream_valid(watcher)

    def test_status_refresh_runs_on_beat(self):
        entries = [
            e for e in settings.CELERY_BEAT_SCHEDULE.values() if e["task"] == "watchers.status_refresh"
        ]
        assert len(entries) == 1
        assert entries[0]["options"]["expires"] <= entries[0]["schedule"]

    def test_the_api_filters_by_the_computed_state(self, api):
        KymaFactory()
        watcher_apply(**KEDA)
        listed = api.get("/api/v1/watchers/?state=Processing").json()
        assert [item["metadata"]["name"] for item in listed["results"]] == ["keda-watcher"]
        assert listed["results"][0]["status"]["state"] == "Processing"
        assert api.get("/api/v1/watchers/?state=Ready").json()["results"] == []
