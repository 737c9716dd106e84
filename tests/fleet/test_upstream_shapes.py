"""What an upstream client meets: a reconciled Kyma's document, the runtime's Kyma and its CRD,
checked against upstream's Kyma CRD as an API server would (nothing pruned, nothing refused)."""

from __future__ import annotations

import io
from copy import deepcopy
from importlib import import_module

import kubernetes_validate
import pytest
import yaml
from django.core.management import call_command

from fleet.models import Kyma
from fleet.models.kyma import MODULE_DEFAULTS
from fleet.resources.kinds import KymaKind
from fleet.services import kymas as kyma_services
from kernel.documents import schema
from kernel.documents.hashing import HASH_ANNOTATION
from kernel.errors import ValidationFailed
from pki import services as pki
from reconciler.kyma_crd import CRD_NAME, structural
from reconciler.runtime_kyma import kyma_crd
from tests.deploy.manifests import KUBERNETES_VERSION, ROOT
from tests.reconciler.helpers import reconcile
from tests.support.crd_schema import (
    UPSTREAM,
    UPSTREAM_KYMA_CRD,
    assert_fits,
    crd_schema,
    defaulted,
    outcome,
    pruned,
    structural_problems,
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
    def test_given_a_reconciled_kyma_then_the_runtime_has_our_kyma_crd(self, reconciled):
        runtime, _ = reconciled
        installed = runtime.get_object("customresourcedefinitions", CRD_NAME)
        ours = kyma_crd()
        upstream = yaml.safe_load(UPSTREAM_KYMA_CRD.read_text())
        assert crd_schema(installed) == crd_schema(ours)
        assert installed["spec"]["names"] == upstream["spec"]["names"]
        assert installed["metadata"]["labels"]["operator.kyma-project.io/managed-by"] == "kyma"
        assert [(v["name"], v["served"], v["storage"]) for v in installed["spec"]["versions"]] == [
            ("v1beta2", True, True)
        ]
        served = [v["name"] for v in upstream["spec"]["versions"] if v["served"]]
        assert served == ["v1beta2"]  # upstream serves no other version we would have to

    def test_given_the_installed_schema_then_an_invalid_user_edit_is_refused_by_it(self, reconciled):
        runtime, _ = reconciled
        schema = crd_schema(runtime.get_object("customresourcedefinitions", CRD_NAME))
        remote = runtime.get_object("Kyma", "default", "kyma-system")
        assert outcome(remote, schema) == ([], [])
        bad_channel = deepcopy(remote)
        bad_channel["spec"]["channel"] = "Fast!"
        no_name = deepcopy(remote)
        no_name["spec"]["modules"] = [{"managed": True}]
        assert outcome(bad_channel, schema)[1] and outcome(no_name, schema)[1]

    def test_given_a_reconciled_runtime_when_reconciled_again_then_the_crd_is_not_rewritten(self, reconciled):
        runtime, kyma = reconciled
        before = runtime.get_object("customresourcedefinitions", CRD_NAME)
        reconcile(kyma)
        after = runtime.get_object("customresourcedefinitions", CRD_NAME)
        assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]


def _shape(schema: dict) -> dict:
    """Property names and types of a schema, nothing else."""
    shape: dict = {"type": schema.get("type")}
    if "properties" in schema:
        shape["properties"] = {name: _shape(sub) for name, sub in schema["properties"].items()}
    if "items" in schema:
        shape["items"] = _shape(schema["items"])
    return shape


def _upstream_kymas() -> list[tuple[str, dict]]:
    found = [("samples/kyma.yaml", yaml.safe_load((UPSTREAM / "samples/kyma.yaml").read_text()))]
    for path in sorted((UPSTREAM / "fixtures/lifecycle-manager").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            items = doc.get("items", []) if doc and doc.get("kind") == "List" else [doc]
            found += [
                (f"{path.name}[{i}]", item)
                for i, item in enumerate(items)
                if item and item.get("kind") == "Kyma"
            ]
    return found


UPSTREAM_KYMAS = _upstream_kymas()
VALID_SPEC = {"channel": "regular", "modules": [{"name": "keda"}]}
# Edits upstream's CRD refuses: ours must refuse them too.
INVALID = {
    "channel not lower-case letters": {"spec": {"channel": "Fast!"}},
    "channel too short": {"spec": {"channel": "ab"}},
    "channel too long": {"spec": {"channel": "a" * 33}},
    "channel not a string": {"spec": {"channel": 7}},
    "no channel": {"spec": {"modules": [{"name": "keda"}]}},
    "module without a name": {"spec": {**VALID_SPEC, "modules": [{"managed": True}]}},
    "module name not a string": {"spec": {**VALID_SPEC, "modules": [{"name": 5}]}},
    "module channel invalid": {"spec": {**VALID_SPEC, "modules": [{"name": "keda", "channel": "X"}]}},
    "managed not a boolean": {"spec": {**VALID_SPEC, "modules": [{"name": "keda", "managed": "yes"}]}},
    "unknown policy": {
        "spec": {**VALID_SPEC, "modules": [{"name": "keda", "customResourcePolicy": "Sometimes"}]}
    },
    "modules not a list": {"spec": {**VALID_SPEC, "modules": {"name": "keda"}}},
    "module not an object": {"spec": {**VALID_SPEC, "modules": ["keda"]}},
    "duplicate module": {"spec": {**VALID_SPEC, "modules": [{"name": "keda"}, {"name": "keda"}]}},
    "skipMaintenanceWindows not a boolean": {"spec": {**VALID_SPEC, "skipMaintenanceWindows": "true"}},
    "spec not an object": {"spec": "regular"},
    "unknown state": {"spec": VALID_SPEC, "status": {"state": "Sleeping"}},
    "module status without a state": {"spec": VALID_SPEC, "status": {"modules": [{"name": "keda"}]}},
    "condition without a reason": {
        "spec": VALID_SPEC,
        "status": {
            "conditions": [
                {
                    "type": "Modules",
                    "status": "True",
                    "message": "",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                }
            ]
        },
    },
    "lastOperation without an operation": {"spec": VALID_SPEC, "status": {"lastOperation": {}}},
}


def _kyma(**parts: object) -> dict:
    return {
        "apiVersion": "operator.kyma-project.io/v1beta2",
        "kind": "Kyma",
        "metadata": {"name": "x"},
        **parts,
    }


class TestOurKymaCrdAgainstUpstreams:
    """The runtime's Kyma CRD is our own text; what it accepts and refuses is upstream's."""

    @pytest.mark.parametrize("doc", [d for _, d in UPSTREAM_KYMAS], ids=[n for n, _ in UPSTREAM_KYMAS])
    def test_given_upstreams_kymas_then_ours_treats_them_as_upstreams_does(self, doc):
        ours = crd_schema(kyma_crd())
        assert outcome(doc, ours) == outcome(doc, upstream_kyma_schema()) == ([], [])

    def test_the_upstream_kymas_include_samples_and_exports_with_status(self):
        names = [name for name, _ in UPSTREAM_KYMAS]
        assert "samples/kyma.yaml" in names and any(n.startswith("kubectl-export-kymas") for n in names)
        assert any("status" in doc for _, doc in UPSTREAM_KYMAS)

    @pytest.mark.parametrize("parts", INVALID.values(), ids=INVALID.keys())
    def test_given_an_invalid_kyma_then_both_refuse_it(self, parts):
        doc = _kyma(**parts)
        assert outcome(doc, upstream_kyma_schema())[1], "the case must be invalid for upstream"
        assert outcome(doc, crd_schema(kyma_crd()))[1]

    def test_given_a_valid_kyma_then_both_accept_it_with_upstreams_defaults(self):
        doc = _kyma(spec=VALID_SPEC)
        ours, upstream = crd_schema(kyma_crd()), upstream_kyma_schema()
        assert outcome(doc, ours) == outcome(doc, upstream) == ([], [])
        assert defaulted(doc, ours) == defaulted(doc, upstream)
        assert defaulted(doc, ours)["spec"]["modules"] == [{"name": "keda", **MODULE_DEFAULTS}]

    @pytest.mark.parametrize(
        "spec",
        [{"channel": "none"}, {"channel": "regular", "modules": [{"name": "Bad_Name"}]}],
        ids=["reserved channel", "module name not a DNS label"],
    )
    def test_given_what_the_control_plane_refuses_then_ours_refuses_it_in_the_runtime_already(self, spec):
        doc = _kyma(spec=spec)
        assert outcome(doc, upstream_kyma_schema()) == ([], [])  # upstream's is looser here, deliberately
        assert outcome(doc, crd_schema(kyma_crd()))[1]
        with pytest.raises(ValidationFailed) as refused:
            KymaKind().validate(doc)
        assert all(path.startswith("spec.") for path, _ in refused.value.errors)

    @pytest.mark.parametrize("part", ["spec", "status"])
    def test_the_property_names_and_types_are_upstreams(self, part):
        ours = crd_schema(kyma_crd())["properties"][part]
        assert _shape(ours) == _shape(upstream_kyma_schema()["properties"][part])

    def test_the_rendered_crd_is_a_valid_structural_crd(self):
        crd = kyma_crd()
        assert kubernetes_validate.validate(crd, KUBERNETES_VERSION, strict=True)
        assert structural_problems(crd_schema(crd)) == []
        assert crd["metadata"]["annotations"][HASH_ANNOTATION]

    def test_the_structural_check_catches_what_kubernetes_refuses(self):
        bad = {
            "type": "object",
            "properties": {
                "a": {
                    "type": "object",
                    "properties": {"b": {"type": "string"}},
                    "additionalProperties": False,
                },
                "c": {"type": "string", "not": {"type": "string", "const": "none"}},
                "d": {"pattern": "x"},
            },
        }
        assert structural_problems(bad) == [
            ".a: additionalProperties beside properties",
            ".a: additionalProperties must be a schema",
            ".c(not): const is not allowed",
            ".c(not): type inside a junctor",
            ".d: no type",
        ]

    def test_given_a_keyword_a_crd_cannot_express_then_the_translation_refuses_it(self):
        with pytest.raises(ValueError, match="propertyNames"):
            structural(schema.LABELS)

    def test_the_product_ships_no_copy_of_upstreams_files(self):
        upstream = {p.read_bytes() for p in UPSTREAM.rglob("*") if p.is_file()}
        for package in (
            "kernel",
            "controlplane",
            "fleet",
            "reconciler",
            "console",
            "watchers",
            "pki",
            "listener",
            "deploy",
        ):
            for path in (ROOT / package).rglob("*"):
                if path.is_file() and "__pycache__" not in path.parts:
                    text = path.read_bytes()
                    assert text not in upstream, path
                    assert b"controller-gen.kubebuilder.io" not in text, path


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
        kyma_services.kyma_save(kyma=kyma)
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
        kyma_services.kyma_save(kyma=kyma)
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
