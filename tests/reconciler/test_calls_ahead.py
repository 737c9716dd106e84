"""Calls of a later step made with an earlier step's wave of writes (``RuntimeStep.ahead``,
:func:`reconciler.apply.apply_ahead` and ``read_ahead``): a runtime is a round trip away, so a
new runtime's first reconcile applies the module catalog's CRDs and discovers the module CRs'
kind with the runtime watcher's Deployment, and reads the Deployment back and applies the
catalog's mirror with its webhooks' apply, instead of a round trip for each. The emulated runtime
holds every answer for a while (its latency), so calls made at once are served beside each other
(``counts.beside``)."""

from __future__ import annotations

import pytest

from fleet import queue
from fleet.k8s.client import client_forget
from fleet.models import Kyma, KymaState, ReconcileRecord
from fleet.services import kymas as kyma_services
from fleet.services import modules as module_services
from reconciler import catalog
from reconciler.apply import resource_name
from reconciler.run import kyma_reconcile_run
from runtime_emulator import crd_manifest
from tests.reconciler.helpers import conditions, run

pytestmark = pytest.mark.django_db

LATENCY = 0.1  # seconds the runtime holds each answer
CRDS = "customresourcedefinitions.apiextensions.k8s.io"
DEPLOYMENT = ("apply", "deployments.apps")
WEBHOOKS = ("apply", "validatingwebhookconfigurations.admissionregistration.k8s.io")
DISCOVERY = ("discovery", "/apis/operator.kyma-project.io/v1alpha1")  # (keda's kind)
CATALOG_CRDS = {resource_name(crd) for crd in catalog.crds()}
TEMPLATES = "moduletemplates.operator.kyma-project.io"
RELEASE_METAS = "modulereleasemetas.operator.kyma-project.io"


@pytest.fixture
def far_new_runtime(new_runtime):
    """A new runtime (``new_runtime``) that holds each answer ``LATENCY`` seconds."""
    runtime, _kyma = new_runtime
    runtime.faults.latency = LATENCY
    return new_runtime


def created(kyma: Kyma) -> set[str]:
    record = ReconcileRecord.objects.filter(kyma=kyma).latest("pk")
    return {c["resource"] for c in record.changes if c.get("action") == "created"}


def calls_of_a_first_reconcile(runtime) -> dict:
    """What a first reconcile asked of the runtime, whichever wave made each call."""
    counts = runtime.counts
    return {
        "crd applies": counts.count("apply", CRDS),  # the Kyma's and the catalog's two
        "crd lists": counts.count("list", CRDS),
        "discoveries": counts.count(*DISCOVERY),
        "deployment reads": counts.count("get", "deployments.apps"),
        "module CRs": counts.count("create", "kedas.operator.kyma-project.io"),
        "catalog applies": counts.count("apply", TEMPLATES) + counts.count("apply", RELEASE_METAS),
        "catalog lists": counts.count("list", TEMPLATES) + counts.count("list", RELEASE_METAS),
    }


EXPECTED = {
    "crd applies": 3,
    "crd lists": 0,
    "discoveries": 1,
    "deployment reads": 1,
    "module CRs": 1,
    "catalog applies": 3,  # (keda's ModuleReleaseMeta, its two versions' ModuleTemplates)
    "catalog lists": 0,
}


def test_given_a_new_runtime_then_later_steps_calls_go_with_the_watcher_waves(far_new_runtime):
    runtime, kyma = far_new_runtime
    kyma_reconcile_run(kyma.pk)
    beside_deployment = runtime.counts.beside(*DEPLOYMENT)
    assert ("apply", CRDS) in beside_deployment and DISCOVERY in beside_deployment
    beside_webhooks = runtime.counts.beside(*WEBHOOKS)
    assert ("get", "deployments.apps") in beside_webhooks
    # the catalog's mirror with the wave after its CRDs'
    assert ("apply", TEMPLATES) in beside_webhooks and ("apply", RELEASE_METAS) in beside_webhooks
    assert ("apply", TEMPLATES) not in beside_deployment
    assert calls_of_a_first_reconcile(runtime) == EXPECTED  # (none made twice, none left out)
    assert created(kyma) >= CATALOG_CRDS
    kyma.refresh_from_db()
    watcher = next(c for c in kyma.conditions if c["type"] == "SKRWebhook")
    assert watcher["status"] == "True"  # (its Deployment read back, with the webhooks' apply)


def test_given_no_room_beside_a_wave_then_each_step_makes_its_own_calls(far_new_runtime, settings):
    settings.RUNTIME_PARALLEL_CALLS = 1
    runtime, kyma = far_new_runtime
    kyma_reconcile_run(kyma.pk)
    assert runtime.counts.peak == 1
    assert calls_of_a_first_reconcile(runtime) == EXPECTED
    assert created(kyma) >= CATALOG_CRDS


def test_given_a_periodic_no_op_by_a_worker_new_to_the_runtime_then_nothing_is_read_ahead(settled):
    kyma, runtime = settled
    client_forget(kyma.pk)
    runtime.counts.reset()
    kyma = run(kyma, queue.PERIODIC_REASON, full=False)
    assert (runtime.counts.reads, runtime.counts.writes, runtime.counts.count(*DISCOVERY)) == (3, 0, 0)
    assert kyma.state == KymaState.READY


def test_given_the_watcher_scaled_to_zero_then_its_readiness_is_judged_on_the_deployment_read_after_repair(
    settled,
):
    kyma, runtime = settled
    runtime.patch_as_user("Deployment", "skr-webhook", {"spec": {"replicas": 0}}, "kyma-system")
    runtime.counts.reset()
    kyma = run(kyma, "spec changed")
    assert runtime.get_object("Deployment", "skr-webhook", "kyma-system")["spec"]["replicas"] == 1
    assert runtime.counts.count("get", "deployments.apps") == 2  # (to compare it, then after its apply)
    assert conditions(kyma)["SKRWebhook"] == ("True", "Ready")  # (not the copy read before its apply)


def module_of_its_own_kind(name: str, group: str, kind: str, **fields) -> str:
    """A catalog module whose CR is of a kind of its own (in the runtime: ``register_crd``)."""
    module_services.module_apply(
        name=name,
        channels={"regular": "1.0.0"},
        cr_group=group,
        cr_version="v1",
        cr_kind=kind,
        cr_plural=f"{kind.lower()}s",
        **fields,
    )
    return f"/apis/{group}/v1"


def test_given_modules_of_several_kinds_then_each_kind_the_step_touches_is_discovered_ahead_once(
    far_new_runtime,
):
    runtime, kyma = far_new_runtime
    ignored = module_of_its_own_kind("istio", "istio.example.com", "Istio")  # (its CR is only read)
    mandatory = module_of_its_own_kind("btp", "btp.example.com", "BtpOperator", mandatory=True)
    for group, kind in (("istio.example.com", "Istio"), ("btp.example.com", "BtpOperator")):
        runtime.register_crd(crd_manifest(group, kind))
    kyma.modules = [{"name": "keda"}, {"name": "istio", "customResourcePolicy": "Ignore"}]
    kyma_services.kyma_save(kyma=kyma)
    runtime.counts.reset()
    kyma_reconcile_run(kyma.pk)
    with_watcher_waves = runtime.counts.beside(*DEPLOYMENT) | runtime.counts.beside(*WEBHOOKS)
    for path in (DISCOVERY[1], ignored, mandatory):
        assert ("discovery", path) in with_watcher_waves, path
        assert runtime.counts.count("discovery", path) == 1, path
    assert runtime.counts.count("get", "istios.istio.example.com") == 1  # (policy Ignore: read)
    assert runtime.counts.count("create", "btpoperators.btp.example.com") == 1
