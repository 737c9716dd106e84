"""The reconcile engine against emulated runtimes, in process: what ends up in the runtime."""

from __future__ import annotations

import base64

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from fleet.models import Kyma, ModuleConfig, ReconcileRecord
from fleet.services import kymas as kyma_services
from fleet.services import modules as module_services
from pki import crypto
from pki import services as pki
from reconciler.run import kyma_reconcile_run
from tests.support.runtimes import connected_kyma, keda_module, klm_watcher

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def catalog():
    pki.ca_bootstrap()
    klm_watcher()
    return keda_module()


def reconcile(kyma: Kyma) -> ReconcileRecord:
    kyma_reconcile_run(kyma.pk)
    kyma.refresh_from_db()
    return ReconcileRecord.objects.filter(kyma_id=kyma.pk).order_by("-id").first()


def conditions(kyma: Kyma) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in kyma.conditions}


class TestFirstReconcile:
    def test_given_a_new_kyma_when_reconciled_then_the_runtime_has_everything(self, runtimes):
        runtime = runtimes()
        kyma = connected_kyma(runtime)
        record = reconcile(kyma)
        assert record.runtime_writes > 0
        assert runtime.get_object("v1/namespaces", "kyma-system") is not None
        remote = runtime.get_object("Kyma", "default", "kyma-system")
        assert remote["metadata"]["labels"] == {
            "operator.kyma-project.io/watched-by": "kyma",
            "operator.kyma-project.io/managed-by": "kyma",
            "kyma-project.io/runtime-id": "rt-k1",
        }
        assert remote["spec"]["modules"][0]["name"] == "keda"
        assert runtime.get_object("Keda", "default", "kyma-system")["spec"] == {"replicas": 1}
        assert ModuleConfig.objects.get(kyma=kyma).spec == {"replicas": 1}
        assert "operator.kyma-project.io/Kyma" in kyma.finalizers

    def test_given_a_new_kyma_when_reconciled_then_the_watcher_resources_match_the_contract(self, runtimes):
        runtime = runtimes()
        kyma = connected_kyma(runtime)
        reconcile(kyma)
        config = runtime.get_object("validatingwebhookconfigurations", "skr-webhook")
        hook, modules = config["webhooks"]
        assert hook["name"] == "kcp-system.klm-watcher.operator.kyma-project.io"
        # Module CRs of the catalog are watched without a Watcher of their own.
        assert modules["name"] == "module-crs.operator.kyma-project.io"
        assert modules["clientConfig"]["service"]["path"] == "/validate/lifecycle-manager"
        assert modules["rules"] == [
            {
                "apiGroups": ["operator.kyma-project.io"],
                "apiVersions": ["v1alpha1"],
                "resources": ["kedas"],
                "operations": ["CREATE", "UPDATE", "DELETE"],
                "scope": "*",
            }
        ]
        assert hook["clientConfig"]["service"]["path"] == "/validate/lifecycle-manager"
        assert hook["rules"][0]["resources"] == ["kymas"] and hook["rules"][0]["apiVersions"] == ["*"]
        assert hook["objectSelector"] == {"matchLabels": {"operator.kyma-project.io/watched-by": "kyma"}}
        assert (hook["failurePolicy"], hook["sideEffects"], hook["timeoutSeconds"]) == (
            "Ignore",
            "NoneOnDryRun",
            15,
        )
        secret = runtime.get_object("Secret", "skr-webhook-tls", "kyma-system")
        files = {k: base64.b64decode(v) for k, v in secret["data"].items()}
        assert base64.b64decode(hook["clientConfig"]["caBundle"]) == files["ca.crt"]
        leaf = crypto.load_certificate(files["tls.crt"])
        assert crypto.common_name(leaf) == "rt-k1"
        assert crypto.verify_client(
            leaf, crypto.load_certificates(files["ca.crt"]), now=kyma.last_reconcile_at
        )
        deployment = runtime.get_object("Deployment", "skr-webhook", "kyma-system")
        container = deployment["spec"]["template"]["spec"]["containers"][0]
        assert container["command"] == ["python", "-m", "watchers.runtime"]
        assert {e["name"] for e in container["env"]} >= {
            "CA_CERT",
            "TLS_CERT",
            "TLS_KEY",
            "KCP_ADDR",
            "KCP_CONTRACT",
        }
        assert runtime.get_object("Service", "skr-webhook", "kyma-system")["spec"]["ports"][0]["port"] == 443
        assert conditions(kyma)["SKRWebhook"] == ("True", "Ready")

    def test_given_a_kyma_without_kubeconfig_when_reconciled_then_error_without_runtime_calls(self):
        kyma, _ = kyma_services.kyma_apply(namespace="kcp-system", name="lonely", runtime_id="rt-lonely")
        record = reconcile(kyma)
        assert kyma.state == "Error" and record.runtime_writes == 0
        assert conditions(kyma)["Runtime"] == ("False", "NoKubeconfig")

    def test_given_a_kyma_without_skr_domain_when_reconciled_then_a_certificate_error(self, runtimes):
        kyma = connected_kyma(runtimes(), skr_domain="")
        reconcile(kyma)
        assert kyma.state == "Error"
        assert conditions(kyma)["SKRWebhook"] == ("False", "CertificateError")


class TestSteadyState:
    def test_given_nothing_changed_when_reconciled_again_then_no_writes_and_no_status_write(self, runtimes):
        runtime = runtimes()
        kyma = connected_kyma(runtime)
        reconcile(kyma)
        module_services.moduleconfig_set_status(
            config=ModuleConfig.objects.get(kyma=kyma), status={"state": "Ready"}
        )
        reconcile(kyma)
        assert kyma.state == "Ready"
        status_before = (kyma.conditions, kyma.module_status, kyma.last_operation)
        record = reconcile(kyma)
        assert record.runtime_writes == 0
        assert (kyma.conditions, kyma.module_status, kyma.last_operation) == status_before

    def test_given_a_bigger_fleet_when_a_noop_reconcile_runs_then_the_query_count_is_the_same(self, runtimes):
        def queries_for(kyma: Kyma) -> int:
            reconcile(kyma)
            reconcile(kyma)
            with CaptureQueriesContext(connection) as captured:
                kyma_reconcile_run(kyma.pk)
            return len(captured)

        first = queries_for(connected_kyma(runtimes(), name="small"))
        for number in range(5):
            connected_kyma(runtimes(), name=f"other-{number}")
        assert queries_for(connected_kyma(runtimes(), name="big")) == first

    def test_given_a_renewed_certificate_when_reconciled_then_the_watcher_restarts(self, runtimes):
        runtime = runtimes()
        kyma = connected_kyma(runtime)
        reconcile(kyma)
        label = "operator.kyma-project.io/pod-restart-trigger"

        def trigger() -> str:
            deployment = runtime.get_object("Deployment", "skr-webhook", "kyma-system")
            return deployment["spec"]["template"]["metadata"]["labels"][label]

        before = trigger()
        pki.certificate_issue_for_kyma(kyma=kyma)
        reconcile(kyma)
        assert trigger() != before


class TestBothWays:
    def test_given_a_user_edit_in_the_runtime_when_reconciled_then_the_control_plane_copy_follows(
        self, runtimes, task_queue, django_capture_on_commit_callbacks
    ):
        runtime = runtimes()
        kyma = connected_kyma(runtime)
        reconcile(kyma)
        runtime.edit_as_user("Kyma", "default", lambda obj: obj["spec"].update(channel="fast"), "kyma-system")
        task_queue()
        with django_capture_on_commit_callbacks(execute=True):
            reconcile(kyma)
        assert kyma.channel == "fast" and kyma.generation == 2
        assert kyma.pushed_generation == 2
        assert task_queue() == []  # the reconcile went on with the adopted spec: no follow-up

    def test_given_a_control_plane_edit_when_reconciled_then_the_runtime_follows(self, runtimes):
        runtime = runtimes()
        kyma = connected_kyma(runtime)
        reconcile(kyma)
        kyma.channel = "fast"
        kyma_services.kyma_save(kyma=kyma)
        reconcile(kyma)
        assert runtime.get_object("Kyma", "default", "kyma-system")["spec"]["channel"] == "fast"

    def test_given_the_runtime_status_when_reconciled_then_it_mirrors_the_control_plane(self, runtimes):
        runtime = runtimes()
        kyma = connected_kyma(runtime)
        reconcile(kyma)
        status = runtime.get_object("Kyma", "default", "kyma-system")["status"]
        assert status["state"] == kyma.state
        assert status["modules"] == [{"name": "keda", "state": "Processing", "version": "1.0.0"}]
