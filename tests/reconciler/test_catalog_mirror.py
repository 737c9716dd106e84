"""The module catalog mirrored into every runtime in upstream's shapes (ModuleTemplate,
ModuleReleaseMeta), kept in sync by the reconcile: drift corrected, nothing written on a no-op,
no read between rechecks, removed when the Kyma goes."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from fleet import queue
from fleet.models import DriftCount, Kyma, ModuleConfig, ReconcileRecord
from fleet.services import kymas as kyma_services
from fleet.services import modules as module_services
from pki import services as pki
from reconciler import catalog
from reconciler.catalog_crds import module_release_meta_crd, module_template_crd
from reconciler.run import kyma_reconcile_run
from tests.factories import beside
from tests.support.calls import calls_of
from tests.support.crd_schema import assert_fits, crd_schema
from tests.support.runtimes import connected_kyma, keda_module, klm_watcher

pytestmark = pytest.mark.django_db

MT = "operator.kyma-project.io/v1beta2/moduletemplates"
MRM = "operator.kyma-project.io/v1beta2/modulereleasemetas"
CRDS = "customresourcedefinitions"


def run(kyma: Kyma, reason: str = "spec changed", *, full: bool = True) -> Kyma:
    now = timezone.now()
    queue.flags().claim([kyma.pk], now, now, full=full)
    kyma_reconcile_run(kyma.pk, reason=reason)
    kyma.refresh_from_db()
    return kyma


def reads_of(runtime, resource: str) -> int:
    return sum(
        n
        for (verb, name), n in runtime.counts.snapshot().items()
        if verb in ("get", "list") and name == resource
    )


def writes_of(runtime, resource: str) -> int:
    return sum(
        n
        for (verb, name), n in runtime.counts.snapshot().items()
        if verb not in ("get", "list", "discovery") and name == resource
    )


@pytest.fixture
def mirrored(runtimes):
    """A Ready Kyma with keda (regular 1.0.0, fast 1.1.0), its manager reporting, watcher alive."""
    pki.ca_bootstrap()
    klm_watcher()
    keda = keda_module()
    keda.versions = [{"version": "1.1.0", "requiresDowntime": True}]
    module_services.module_save(module=keda)
    runtime = runtimes()
    kyma = connected_kyma(runtime)
    beside(kyma.pk, watcher_last_seen_at=timezone.now())
    run(kyma)
    ModuleConfig.objects.filter(kyma=kyma).update(status={"state": "Ready"})
    kyma = run(kyma, "module status reported")
    assert kyma.state == "Ready"
    return kyma, runtime, keda


def names(runtime, resource: str) -> set[str]:
    return {obj["metadata"]["name"] for obj in runtime.list_objects(resource, "kyma-system")}


def test_given_a_reconciled_runtime_then_it_holds_the_catalog_in_upstreams_shapes(mirrored):
    _kyma, runtime, _ = mirrored
    assert runtime.get_object(CRDS, "moduletemplates.operator.kyma-project.io") is not None
    assert runtime.get_object(CRDS, "modulereleasemetas.operator.kyma-project.io") is not None
    meta = runtime.get_object(MRM, "keda", "kyma-system")
    assert meta["spec"] == {
        "moduleName": "keda",
        "channels": [{"channel": "fast", "version": "1.1.0"}, {"channel": "regular", "version": "1.0.0"}],
    }
    assert names(runtime, MT) == {"keda-1.0.0", "keda-1.1.0"}
    template = runtime.get_object(MT, "keda-1.1.0", "kyma-system")
    assert template["spec"]["moduleName"] == "keda" and template["spec"]["version"] == "1.1.0"
    assert template["spec"]["requiresDowntime"] is True
    assert runtime.get_object(MT, "keda-1.0.0", "kyma-system")["spec"]["requiresDowntime"] is False
    assert template["spec"]["data"] == {
        "apiVersion": "operator.kyma-project.io/v1alpha1",
        "kind": "Keda",
        "metadata": {"name": "default", "namespace": "kyma-system"},
        "spec": {"replicas": 1},
    }
    assert template["metadata"]["labels"]["operator.kyma-project.io/managed-by"] == "kyma"


def test_the_mirrored_objects_fit_the_crds_the_runtime_got(mirrored):
    _, runtime, _ = mirrored
    assert_fits(runtime.get_object(MT, "keda-1.0.0", "kyma-system"), crd_schema(module_template_crd()))
    assert_fits(runtime.get_object(MRM, "keda", "kyma-system"), crd_schema(module_release_meta_crd()))


# Upstream's api/v1beta2 types (lifecycle-manager c5b83f1b): the JSON names and types of the spec
# fields, from moduletemplate_types.go (ModuleTemplateSpec) and modulereleasemeta_types.go
# (ModuleReleaseMetaSpec, ChannelVersionAssignment).
UPSTREAM_TEMPLATE_SPEC = {
    "channel": "string",
    "version": "string",
    "moduleName": "string",
    "mandatory": "boolean",
    "data": "object",
    "descriptor": "object",
    "customStateCheck": "array",
    "resources": "array",
    "info": "object",
    "associatedResources": "array",
    "manager": "object",
    "requiresDowntime": "boolean",
}
UPSTREAM_RELEASE_META_SPEC = {
    "moduleName": "string",
    "ocmComponentName": "string",
    "channels": "array",
    "mandatory": "object",
    "beta": "boolean",
    "internal": "boolean",
    "kymaSelector": "object",
}


@pytest.mark.parametrize(
    ("crd", "kind", "short", "upstream"),
    [
        (module_template_crd(), "ModuleTemplate", "mt", UPSTREAM_TEMPLATE_SPEC),
        (module_release_meta_crd(), "ModuleReleaseMeta", "mrm", UPSTREAM_RELEASE_META_SPEC),
    ],
)
def test_our_crds_have_upstreams_names_fields_and_types(crd, kind, short, upstream):
    assert crd["spec"]["names"]["kind"] == kind and crd["spec"]["names"]["shortNames"] == [short]
    assert crd["spec"]["group"] == "operator.kyma-project.io" and crd["spec"]["scope"] == "Namespaced"
    spec = crd_schema(crd)["properties"]["spec"]["properties"]
    assert {name: field["type"] for name, field in spec.items()} == upstream


def test_given_nothing_changed_then_a_periodic_reconcile_reads_and_writes_none_of_it(mirrored):
    kyma, runtime, _ = mirrored
    runtime.counts.reset()
    run(kyma, queue.PERIODIC_REASON, full=False)
    assert runtime.counts.reads <= 3 and runtime.counts.writes == 0
    for resource in (
        "moduletemplates.operator.kyma-project.io",
        "modulereleasemetas.operator.kyma-project.io",
    ):
        assert reads_of(runtime, resource) == 0


def test_given_a_new_version_then_the_mirror_follows_reading_only_what_it_had_seen(mirrored):
    kyma, runtime, keda = mirrored
    keda.refresh_from_db()
    keda.channels = {"regular": "1.0.0", "fast": "1.2.0"}
    module_services.module_save(module=keda)
    runtime.counts.reset()
    run(kyma, queue.PERIODIC_REASON, full=False)
    assert names(runtime, MT) == {"keda-1.0.0", "keda-1.2.0"}  # 1.1.0 no longer offered: gone
    assert runtime.get_object(MRM, "keda", "kyma-system")["spec"]["channels"][0] == {
        "channel": "fast",
        "version": "1.2.0",
    }
    # the new template was never there (created blind), the changed release meta is listed
    assert reads_of(runtime, "moduletemplates.operator.kyma-project.io") == 0
    assert reads_of(runtime, "modulereleasemetas.operator.kyma-project.io") == 1
    runtime.counts.reset()
    run(kyma, queue.PERIODIC_REASON, full=False)
    assert runtime.counts.writes == 0


def test_given_a_user_edit_of_a_template_then_it_is_put_back_when_its_recheck_is_due(mirrored, settings):
    kyma, runtime, _ = mirrored
    runtime.edit_as_user(MT, "keda-1.0.0", lambda obj: obj["spec"].update(version="9.9.9"), "kyma-system")
    run(kyma, queue.PERIODIC_REASON, full=False)
    assert runtime.get_object(MT, "keda-1.0.0", "kyma-system")["spec"]["version"] == "9.9.9"  # not due yet
    settings.RUNTIME_RECHECK_INTERVAL = 0
    before = DriftCount.objects.filter(kind="ModuleTemplate").values_list("total", flat=True).first() or 0
    run(kyma, queue.PERIODIC_REASON, full=False)
    assert runtime.get_object(MT, "keda-1.0.0", "kyma-system")["spec"]["version"] == "1.0.0"
    assert DriftCount.objects.get(kind="ModuleTemplate").total == before + 1


def test_given_a_deleted_release_meta_and_a_stray_template_then_the_recheck_repairs_both(mirrored, settings):
    kyma, runtime, _ = mirrored
    runtime.delete_as_user(MRM, "keda", "kyma-system")
    stray = runtime.get_object(MT, "keda-1.0.0", "kyma-system")
    stray["metadata"] = {
        "name": "keda-0.9.0",
        "namespace": "kyma-system",
        "labels": stray["metadata"]["labels"],
    }
    runtime.create_as_user(stray)
    settings.RUNTIME_RECHECK_INTERVAL = 0
    run(kyma, queue.PERIODIC_REASON, full=False)
    assert runtime.get_object(MRM, "keda", "kyma-system") is not None
    assert names(runtime, MT) == {"keda-1.0.0", "keda-1.1.0"}


def test_given_a_module_removed_from_the_catalog_then_its_mirror_goes(mirrored):
    kyma, runtime, keda = mirrored
    kyma.modules = []
    kyma_services.kyma_save(kyma=kyma)
    run(kyma)
    module_services.module_delete(module=keda)
    run(kyma)
    assert names(runtime, MT) == set() and names(runtime, MRM) == set()


def test_given_the_kyma_deleted_then_the_mirror_goes_and_the_crds_stay(mirrored):
    kyma, runtime, _ = mirrored
    kyma_services.kyma_delete(kyma=kyma)
    kyma_reconcile_run(kyma.pk)
    assert not Kyma.objects.filter(pk=kyma.pk).exists()
    assert names(runtime, MT) == set() and names(runtime, MRM) == set()
    assert runtime.get_object(CRDS, "moduletemplates.operator.kyma-project.io") is not None


def test_given_a_first_reconcile_then_the_catalog_is_created_without_a_read(new_runtime):
    runtime, kyma = new_runtime
    kyma_reconcile_run(kyma.pk)
    for resource in (
        "moduletemplates.operator.kyma-project.io",
        "modulereleasemetas.operator.kyma-project.io",
    ):
        assert reads_of(runtime, resource) == 0
    assert writes_of(runtime, "moduletemplates.operator.kyma-project.io") == 2
    assert writes_of(runtime, "modulereleasemetas.operator.kyma-project.io") == 1


def test_the_timeline_says_what_the_mirror_removed(mirrored):
    kyma, _runtime, keda = mirrored
    keda.refresh_from_db()
    keda.channels = {"regular": "1.0.0"}
    module_services.module_save(module=keda)
    run(kyma)
    record = ReconcileRecord.objects.filter(kyma=kyma).order_by("-pk").first()
    removed = {"kind": "removed", "resource": "ModuleTemplate kyma-system/keda-1.1.0"}
    assert {**removed, "action": "deleted (left the catalog)"} in record.changes
    assert dt.timedelta(0) <= timezone.now() - record.started_at < dt.timedelta(minutes=1)


def test_given_new_runtimes_then_each_first_reconcile_renders_the_mirror_once(new_runtime, runtimes):
    second = runtimes()
    for runtime, kyma in (new_runtime, (second, connected_kyma(second, name="k2"))):
        with calls_of(catalog.desired) as renders:
            kyma_reconcile_run(kyma.pk)
        assert renders.count == 1, kyma.name  # (for its calls ahead and its own step; the first
        # reconcile's render is not the second's)
        assert writes_of(runtime, "moduletemplates.operator.kyma-project.io") == 2
