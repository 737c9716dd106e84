"""What an upstream client meets: a reconciled Kyma's document, the runtime's Kyma and its CRD,
checked against upstream's Kyma CRD as an API server would (nothing pruned, nothing refused)."""

from __future__ import annotations

import io
from copy import deepcopy
from importlib import import_module

import pytest
import yaml
from django.core.management import call_command

from fleet.models import Kyma
from fleet.services import kymas as kyma_services
from pki import services as pki
from tests.fleet.reconciler.helpers import reconcile
from tests.support.crd_schema import (
    UPSTREAM,
    UPSTREAM_KYMA_CRD,
    assert_fits,
    crd_schema,
    pruned,
    upstream_kyma_schema,
    violations,
)
from tests.support.runtimes import connected_kyma, keda_module, klm_watcher

pytestmark = pytest.mark.django_db

UPSTREAM_FINALIZER = "operator.kyma-project.io/Kyma"
OLD_FINALIZER = "operator.kyma-project.io/kyma"
KEDA_RESOURCE = {
    "apiVersion": "operator.kyma-project.io/v1alpha1",
    "kind": "Keda",
    "metadata": {"name": "default", "namespace": "kyma-system", "generation": 1},
}


@pytest.fixture(autouse=True)
def catalog():
    pki.ca_bootstrap()
    klm_watcher()
    return keda_module()


@pytest.fixture
def reconciled(runtimes):
    runtime = runtimes()
    kyma = connected_kyma(runtime)
    reconcile(kyma)
    return runtime, kyma


def get_yaml(*args: str) -> dict:
    out = io.StringIO()
    call_command("get", *args, "-o", "yaml", stdout=out, stderr=io.StringIO())
    return yaml.safe_load(out.getvalue())


class TestTheSchemaCheck:
    """The check itself must catch what an API server would drop or refuse."""

    def test_given_fields_the_crd_does_not_declare_then_they_are_reported_as_pruned(self):
        doc = {
            "apiVersion": "operator.kyma-project.io/v1beta2",
            "kind": "Kyma",
            "metadata": {"name": "x", "anything": 1},
            "spec": {"channel": "regular"},
            "status": {
                "state": "Ready",
                "observedGeneration": 3,
                "modules": [{"name": "keda", "state": "Ready", "customResourcePolicy": "Ignore"}],
            },
        }
        assert pruned(doc, upstream_kyma_schema()) == [
            "status.observedGeneration",
            "status.modules[0].customResourcePolicy",
        ]

    def test_given_a_wrong_value_then_it_is_a_violation(self):
        doc = {"spec": {"channel": "Not-A-Channel", "modules": [{"managed": True}]}}
        problems = violations(doc, upstream_kyma_schema())
        assert any(p.startswith("spec.channel:") for p in problems)
        assert any(p.startswith("spec.modules.0:") and "'name'" in p for p in problems)

    def test_given_upstreams_own_export_then_it_fits(self):
        [exported] = yaml.safe_load(
            (UPSTREAM / "fixtures/lifecycle-manager/kubectl-export-kymas.yaml").read_text()
        )["items"][:1]
        assert_fits(exported, upstream_kyma_schema())


class TestReconciledKymaDocument:
    def test_given_a_reconciled_kyma_when_got_as_yaml_then_it_fits_upstreams_crd(self, reconciled):
        _, kyma = reconciled
        doc = get_yaml("kymas", f"{kyma.namespace}/{kyma.name}")
        assert_fits(doc, upstream_kyma_schema())
        assert "observedGeneration" not in doc["status"]
        [module] = doc["status"]["modules"]
        assert module["resource"] == KEDA_RESOURCE
        assert "customResourcePolicy" not in module
        assert doc["metadata"]["finalizers"] == [UPSTREAM_FINALIZER]

    def test_given_a_reconciled_kyma_when_got_from_the_api_then_it_fits_upstreams_crd(self, reconciled, api):
        _, kyma = reconciled
        response = api.get(f"/api/v1/kymas/{kyma.uid}/")
        assert response.status_code == 200
        doc = response.json()
        assert_fits(doc, upstream_kyma_schema())
        assert doc["status"]["modules"][0]["resource"] == KEDA_RESOURCE

    def test_given_a_reconciled_kyma_then_the_runtimes_kyma_fits_upstreams_crd(self, reconciled):
        runtime, _ = reconciled
        remote = runtime.get_object("Kyma", "default", "kyma-system")
        assert remote["status"]["state"]
        assert_fits(remote, upstream_kyma_schema())
        assert "observedGeneration" not in remote["status"]


class TestFinalizer:
    def test_given_a_new_kyma_when_reconciled_then_it_carries_upstreams_finalizer(self, reconciled):
        _, kyma = reconciled
        assert kyma.finalizers == [UPSTREAM_FINALIZER]

    def test_given_the_old_finalizer_when_reconciled_then_it_is_replaced_not_duplicated(self, runtimes):
        kyma = connected_kyma(runtimes())
        Kyma.objects.filter(pk=kyma.pk).update(finalizers=["other.example.com/keep", OLD_FINALIZER])
        kyma.refresh_from_db()
        reconcile(kyma)
        assert kyma.finalizers == ["other.example.com/keep", UPSTREAM_FINALIZER]
        reconcile(kyma)
        assert Kyma.objects.get(pk=kyma.pk).finalizers == ["other.example.com/keep", UPSTREAM_FINALIZER]

    def test_given_a_kyma_migrated_from_upstream_when_reconciled_then_no_duplicates(self, runtimes):
        runtime = runtimes()
        kyma = connected_kyma(runtime)
        [exported] = yaml.safe_load(
            (UPSTREAM / "fixtures/lifecycle-manager/kubectl-export-kymas.yaml").read_text()
        )["items"][:1]
        upstream_status = exported["status"]
        Kyma.objects.filter(pk=kyma.pk).update(
            finalizers=[UPSTREAM_FINALIZER],
            state=upstream_status["state"],
            conditions=upstream_status["conditions"],
            module_status=upstream_status["modules"],
            last_operation=upstream_status["lastOperation"],
        )
        kyma.refresh_from_db()
        reconcile(kyma)
        assert kyma.finalizers == [UPSTREAM_FINALIZER]
        doc = get_yaml("kymas", f"{kyma.namespace}/{kyma.name}")
        assert_fits(doc, upstream_kyma_schema())
        assert [m["name"] for m in doc["status"]["modules"]] == ["keda"]
        assert doc["metadata"]["finalizers"] == [UPSTREAM_FINALIZER]

    @pytest.mark.parametrize("finalizer", [OLD_FINALIZER, UPSTREAM_FINALIZER])
    def test_given_either_finalizer_when_deleted_then_the_runtime_is_cleaned_then_the_row_goes(
        self, runtimes, finalizer
    ):
        runtime = runtimes()
        kyma = connected_kyma(runtime)
        reconcile(kyma)
        Kyma.objects.filter(pk=kyma.pk).update(finalizers=[finalizer])
        kyma.refresh_from_db()
        kyma_services.kyma_delete(kyma=kyma)
        assert reconcile(kyma) is None
        assert not Kyma.objects.filter(pk=kyma.pk).exists()
        assert runtime.get_object("Kyma", "default", "kyma-system") is None
        assert runtime.get_object("Keda", "default", "kyma-system") is None

    def test_given_both_finalizers_and_a_foreign_one_when_deleted_then_only_the_foreign_one_stays(
        self, runtimes
    ):
        runtime = runtimes()
        kyma = connected_kyma(runtime)
        reconcile(kyma)
        Kyma.objects.filter(pk=kyma.pk).update(
            finalizers=[OLD_FINALIZER, "other.example.com/keep", UPSTREAM_FINALIZER]
        )
        kyma.refresh_from_db()
        kyma_services.kyma_delete(kyma=kyma)
        reconcile(kyma)
        assert Kyma.objects.get(pk=kyma.pk).finalizers == ["other.example.com/keep"]
        assert runtime.get_object("Kyma", "default", "kyma-system") is None


class TestRuntimeKymaCrd:
    def test_given_a_reconciled_kyma_then_the_runtime_has_upstreams_kyma_schema(self, reconciled):
        runtime, _ = reconciled
        installed = runtime.get_object("customresourcedefinitions", "kymas.operator.kyma-project.io")
        upstream = yaml.safe_load(UPSTREAM_KYMA_CRD.read_text())
        assert crd_schema(installed) == crd_schema(upstream)
        assert installed["spec"]["names"] == upstream["spec"]["names"]
        assert installed["metadata"]["labels"]["operator.kyma-project.io/managed-by"] == "kyma"
        stored = [v["name"] for v in installed["spec"]["versions"] if v["storage"]]
        assert stored == ["v1beta2"]

    def test_given_the_installed_schema_then_an_invalid_user_edit_is_refused_by_it(self, reconciled):
        runtime, _ = reconciled
        schema = crd_schema(runtime.get_object("customresourcedefinitions", "kymas.operator.kyma-project.io"))
        remote = runtime.get_object("Kyma", "default", "kyma-system")
        assert violations(remote, schema) == []
        bad_channel = deepcopy(remote)
        bad_channel["spec"]["channel"] = "Fast!"
        no_name = deepcopy(remote)
        no_name["spec"]["modules"] = [{"managed": True}]
        assert violations(bad_channel, schema) and violations(no_name, schema)

    def test_given_a_reconciled_runtime_when_reconciled_again_then_the_crd_is_not_rewritten(self, reconciled):
        runtime, kyma = reconciled
        before = runtime.get_object("customresourcedefinitions", "kymas.operator.kyma-project.io")
        reconcile(kyma)
        after = runtime.get_object("customresourcedefinitions", "kymas.operator.kyma-project.io")
        assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]


class TestModuleCrOwnership:
    """Which module CRs go with their module is kept apart from upstream's status.modules."""

    def test_given_policy_ignore_and_a_users_cr_when_the_module_is_removed_then_the_cr_stays(self, runtimes):
        runtime = runtimes()
        runtime.create_as_user({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kyma-system"}})
        runtime.create_as_user(
            {
                "apiVersion": "operator.kyma-project.io/v1alpha1",
                "kind": "Keda",
                "metadata": {"name": "default", "namespace": "kyma-system"},
                "spec": {"replicas": 2},
            }
        )
        kyma = connected_kyma(runtime, modules=[{"name": "keda", "customResourcePolicy": "Ignore"}])
        reconcile(kyma)
        assert kyma.module_status[0]["resource"] == KEDA_RESOURCE
        assert kyma.owned_module_resources == {}
        kyma.modules = []
        kyma_services.kyma_save(kyma)
        reconcile(kyma)
        assert runtime.get_object("Keda", "default", "kyma-system") is not None

    def test_given_policy_create_and_delete_then_the_cr_is_owned_until_the_module_goes(self, runtimes):
        runtime = runtimes()
        kyma = connected_kyma(runtime)
        reconcile(kyma)
        assert kyma.owned_module_resources == {
            "keda": {
                "apiVersion": "operator.kyma-project.io/v1alpha1",
                "kind": "Keda",
                "name": "default",
                "namespace": "kyma-system",
            }
        }
        kyma.modules = []
        kyma_services.kyma_save(kyma)
        reconcile(kyma)
        assert runtime.get_object("Keda", "default", "kyma-system") is None
        assert kyma.owned_module_resources == {} and kyma.module_status == []


class TestStoredStatusMigration:
    """Kymas stored before: their status is reshaped, their owned CRs and finalizer carried over."""

    reshape = staticmethod(import_module("fleet.migrations.0006_kyma_upstream_status_shape")._reshape)

    def test_given_the_old_shape_when_migrated_then_upstreams_shape_and_the_owned_crs(self):
        ref = {"apiVersion": "operator.kyma-project.io/v1alpha1", "kind": "Keda", "name": "default"}
        kyma = Kyma(
            finalizers=[OLD_FINALIZER, "other.example.com/keep", UPSTREAM_FINALIZER],
            module_status=[
                {"name": "keda", "state": "Ready", "resource": {**ref, "namespace": "kyma-system"}},
                {
                    "name": "serverless",
                    "state": "Ready",
                    "resource": {**ref, "kind": "Serverless", "namespace": ""},
                    "customResourcePolicy": "Ignore",
                },
                {"name": "nope", "state": "Error", "message": "not in the module catalog"},
            ],
        )
        assert self.reshape(kyma) is True
        assert kyma.finalizers == [UPSTREAM_FINALIZER, "other.example.com/keep"]
        assert kyma.module_status == [
            {
                "name": "keda",
                "state": "Ready",
                "resource": {
                    "apiVersion": "operator.kyma-project.io/v1alpha1",
                    "kind": "Keda",
                    "metadata": {"name": "default", "namespace": "kyma-system"},
                },
            },
            {
                "name": "serverless",
                "state": "Ready",
                "resource": {
                    "apiVersion": "operator.kyma-project.io/v1alpha1",
                    "kind": "Serverless",
                    "metadata": {"name": "default"},
                },
            },
            {"name": "nope", "state": "Error", "message": "not in the module catalog"},
        ]
        assert kyma.owned_module_resources == {"keda": {**ref, "namespace": "kyma-system"}}
        assert pruned({"status": {"modules": kyma.module_status}}, upstream_kyma_schema()) == []
        assert self.reshape(kyma) is False
