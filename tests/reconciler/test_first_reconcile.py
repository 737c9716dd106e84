"""A new runtime's first reconcile writes what it must without reading it first: nothing was ever
seen in place there, so there is nothing to compare with (each read was a round trip, 50 ms and
more to a runtime in another region). Later reconciles read and compare as before."""

from __future__ import annotations

import pytest

from fleet.models import Kyma, ModuleConfig, ReconcileRecord
from pki import services as pki
from reconciler.run import kyma_reconcile_run
from runtime_emulator.emulator import RuntimeEmulator
from tests.support.runtimes import connected_kyma, keda_module, klm_watcher

pytestmark = pytest.mark.django_db

# What the runtime watcher and the Kyma CRD consist of (none of it is read before it is written).
APPLIED_BLIND = (
    "customresourcedefinitions.apiextensions.k8s.io",
    "priorityclasses.scheduling.k8s.io",
    "networkpolicies.networking.k8s.io",
    "secrets",
    "services",
    "validatingwebhookconfigurations.admissionregistration.k8s.io",
    "kedas.operator.kyma-project.io",  # the module's default CR (policy CreateAndDelete)
)
KEDAS = "operator.kyma-project.io/v1alpha1/kedas"


@pytest.fixture
def runtime(runtimes) -> RuntimeEmulator:
    pki.ca_bootstrap()
    klm_watcher()
    keda_module()
    return runtimes()


def reads_of(runtime: RuntimeEmulator, resource: str) -> int:
    return runtime.counts.count("get", resource) + runtime.counts.count("list", resource)


def changes_of(kyma: Kyma) -> dict[str, str]:
    record = ReconcileRecord.objects.filter(kyma=kyma).order_by("-pk").first()
    return {c["resource"]: c["action"] for c in record.changes if c.get("kind") == "applied"}


def test_a_first_reconcile_applies_without_reading_first(runtime):
    kyma = connected_kyma(runtime)
    runtime.counts.reset()

    kyma_reconcile_run(kyma.pk)

    assert {resource: reads_of(runtime, resource) for resource in APPLIED_BLIND} == dict.fromkeys(
        APPLIED_BLIND, 0
    )
    # kyma-system alone is read first: the runtime's guard refuses any change of an existing one.
    assert runtime.counts.count("get", "namespaces") == 1
    discovered = {r for (verb, r) in runtime.counts.snapshot() if verb == "discovery"}
    assert "/apis/operator.kyma-project.io/v1beta2" not in discovered  # known from our own CRD
    secret = runtime.get_object("v1/secrets", "skr-webhook-tls", "kyma-system")
    assert secret is not None and secret["data"]["tls.crt"]
    assert runtime.get_object("apps/v1/deployments", "skr-webhook", "kyma-system") is not None
    assert runtime.get_object("namespaces", "kyma-system") is not None
    kyma.refresh_from_db()
    assert changes_of(kyma)["Secret kyma-system/skr-webhook-tls"] == "created"
    assert runtime.counts.count("create", "kedas.operator.kyma-project.io") == 1
    assert runtime.get_object(KEDAS, "default", "kyma-system")["spec"] == {"replicas": 1}
    assert changes_of(kyma)["Keda kyma-system/default"] == "created (module keda)"


def test_a_module_cr_a_user_wrote_before_the_first_reconcile_is_kept_as_written(runtime):
    """The create is answered 409; the user's CR is then read, and its spec is the config's."""
    runtime.create_as_user({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kyma-system"}})
    runtime.create_as_user(
        {
            "apiVersion": "operator.kyma-project.io/v1alpha1",
            "kind": "Keda",
            "metadata": {"name": "default", "namespace": "kyma-system"},
            "spec": {"replicas": 7},
        }
    )
    before = runtime.get_object(KEDAS, "default", "kyma-system")
    kyma = connected_kyma(runtime)

    kyma_reconcile_run(kyma.pk)

    after = runtime.get_object(KEDAS, "default", "kyma-system")
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert ModuleConfig.objects.get(kyma=kyma).spec == {"replicas": 7}
    assert runtime.counts.count("get", "kedas.operator.kyma-project.io") == 1
    kyma.refresh_from_db()
    assert "Keda kyma-system/default" not in changes_of(kyma)


def test_later_reconciles_read_and_compare_and_write_nothing(runtime):
    kyma = connected_kyma(runtime)
    kyma_reconcile_run(kyma.pk)
    runtime.counts.reset()

    kyma_reconcile_run(kyma.pk)

    assert runtime.counts.writes == 0
    assert runtime.counts.count("get", "secrets") == 1  # drift of the Secret is still looked for


def test_a_runtime_already_holding_the_objects_is_adopted_unchanged(runtime):
    """A runtime the control plane lost its record of (the Kyma registered again): the objects
    are applied over the copies there, which server-side apply leaves as they are."""
    kyma = connected_kyma(runtime)
    kyma_reconcile_run(kyma.pk)
    before = runtime.get_object("apps/v1/deployments", "skr-webhook", "kyma-system")
    Kyma.objects.filter(pk=kyma.pk).update(runtime_verified={})

    kyma_reconcile_run(kyma.pk)

    after = runtime.get_object("apps/v1/deployments", "skr-webhook", "kyma-system")
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    kyma.refresh_from_db()
    assert changes_of(kyma)["Deployment kyma-system/skr-webhook"] == "adopted (it was there already)"
    runtime.counts.reset()
    kyma_reconcile_run(kyma.pk)
    assert runtime.counts.writes == 0


def test_the_runtimes_kyma_deleted_is_created_again_in_its_existing_namespace(runtime):
    kyma = connected_kyma(runtime)
    kyma_reconcile_run(kyma.pk)
    runtime.delete_as_user("operator.kyma-project.io/v1beta2/kymas", "default", "kyma-system")
    runtime.counts.reset()

    kyma_reconcile_run(kyma.pk)

    assert runtime.get_object("operator.kyma-project.io/v1beta2/kymas", "default", "kyma-system")
    # The namespace is there: read, never written (the runtime's guard would refuse a change of it).
    assert runtime.counts.count("get", "namespaces") == 1
    assert runtime.counts.count(resource="namespaces") == 1
