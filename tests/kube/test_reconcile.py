"""A Kyma's life in a real runtime, under the least-privilege identity of deploy/runtime-access/:
its first reconcile, a no-op that writes nothing, drift corrected by beat's sweep, a SyncResource
pruned, the CA rotated, a write the runtime's RBAC refuses, and deletion leaving nothing behind."""

from __future__ import annotations

import pytest
from django.utils import timezone

from fleet import queue
from fleet.models import Kyma, ModuleConfig
from fleet.services import kymas as kyma_services
from fleet.services import modules as module_services
from pki import services as pki
from reconciler import catalog as catalog_mirror
from reconciler.run import kyma_reconcile_run
from tests.reconciler.helpers import CONFIGMAP, conditions
from tests.support.kube import Runtime, connect_kyma, wait_for
from tests.support.runtimes import keda_module, klm_watcher

pytestmark = pytest.mark.django_db

MANAGER = "kyma-control-plane"  # RUNTIME_FIELD_MANAGER
WATCHER_OBJECTS = [
    ("scheduling.k8s.io/v1", "priorityclasses", "skr-webhook-priority", None),
    ("v1", "secrets", "skr-webhook-tls", "kyma-system"),
    ("v1", "services", "skr-webhook", "kyma-system"),
    ("v1", "services", "skr-webhook-metrics", "kyma-system"),
    ("apps/v1", "deployments", "skr-webhook", "kyma-system"),
    ("admissionregistration.k8s.io/v1", "validatingwebhookconfigurations", "skr-webhook", None),
]


def reconcile(kyma: Kyma, *, reason: str = "test", full: bool = True) -> Kyma:
    """One reconcile as a queued request runs it (``full``: it reads everything)."""
    now = timezone.now()
    queue.flags().claim([kyma.pk], now, now, full=full)
    kyma_reconcile_run(kyma.pk, reason=reason)
    if Kyma.objects.filter(pk=kyma.pk).exists():
        kyma.refresh_from_db()
    return kyma


def periodic(kyma: Kyma) -> Kyma:
    return reconcile(kyma, reason=queue.PERIODIC_REASON, full=False)


def report_ready(kyma: Kyma) -> None:
    """keda's manager reports its module Ready (as the SDK does)."""
    config = ModuleConfig.objects.get(kyma=kyma, module__name="keda")
    module_services.moduleconfig_set_status(config=config, status={"state": "Ready"})


def settled(runtime: Runtime, kyma: Kyma) -> Kyma:
    """Reconcile until the runtime watcher's pod is Ready and the Kyma with it."""

    def ready() -> bool:
        reconcile(kyma)
        return kyma.state == "Ready"

    report_ready(reconcile(kyma))
    wait_for(ready, timeout=60, what=f"Kyma Ready (last: {kyma.state} {conditions(kyma)})")
    return kyma


def managers(obj: dict) -> set[tuple[str, str, str]]:
    return {
        (m["manager"], m["operation"], m.get("subresource", "")) for m in obj["metadata"]["managedFields"]
    }


@pytest.fixture
def catalog() -> None:
    pki.ca_bootstrap()
    klm_watcher()
    keda_module()


@pytest.fixture
def kyma(real_runtime: Runtime, catalog) -> Kyma:
    kyma = connect_kyma(real_runtime)
    module_services.syncresource_apply(
        kyma=kyma, module=keda_module(), name="keda-config", manifests=CONFIGMAP.format(name="keda", level=1)
    )
    return kyma


def test_a_first_reconcile_is_accepted_with_our_field_manager(real_runtime, kyma):
    kyma = reconcile(kyma)

    assert kyma.state != "Error", kyma.conditions
    for api_version, plural, name, namespace in WATCHER_OBJECTS:
        live = real_runtime.get(api_version, plural, name, namespace)
        assert live is not None, (plural, name)
        assert (MANAGER, "Apply", "") in managers(live), (plural, name)
    policies = real_runtime.list("networking.k8s.io/v1", "networkpolicies", "kyma-system")
    assert len(policies) == 4
    assert all((MANAGER, "Apply", "") in managers(p) for p in policies)
    crd = real_runtime.get(
        "apiextensions.k8s.io/v1", "customresourcedefinitions", "kymas.operator.kyma-project.io"
    )
    assert (MANAGER, "Apply", "") in managers(crd)
    runtime_kyma = real_runtime.get("operator.kyma-project.io/v1beta2", "kymas", "default", "kyma-system")
    assert [m["name"] for m in runtime_kyma["spec"]["modules"]] == ["keda"]
    assert {(MANAGER, "Apply", ""), (MANAGER, "Update", "status")} <= managers(runtime_kyma)
    keda = real_runtime.get("operator.kyma-project.io/v1alpha1", "kedas", "default", "kyma-system")
    assert keda["spec"] == {"replicas": 1}
    config_map = real_runtime.get("v1", "configmaps", "keda", "kyma-system")
    assert config_map["data"] == {"level": "1"}
    assert (MANAGER, "Apply", "") in managers(config_map)
    # The catalog's mirror: its CRDs, a template per version a channel names, the release meta.
    for plural in ("moduletemplates", "modulereleasemetas"):
        crd = real_runtime.get(
            "apiextensions.k8s.io/v1", "customresourcedefinitions", f"{plural}.operator.kyma-project.io"
        )
        assert (MANAGER, "Apply", "") in managers(crd), plural

    # A CRD just created may not be served yet (on a loaded machine it was not): then the
    # reconcile asked for the next one within the settling time, and that one mirrors the catalog.
    # (The templates and the release meta are written at once: either may be there first.)
    def templates() -> list[str]:
        items = real_runtime.list("operator.kyma-project.io/v1beta2", "moduletemplates", "kyma-system")
        return sorted(t["metadata"]["name"] for t in items)

    def release_meta() -> dict | None:
        return real_runtime.get(
            "operator.kyma-project.io/v1beta2", "modulereleasemetas", "keda", "kyma-system"
        )

    def mirrored() -> bool:
        if templates() == ["keda-1.0.0", "keda-1.1.0"] and release_meta() is not None:
            return True
        assert kyma.next_reconcile_at <= kyma.last_reconcile_at + catalog_mirror.CRD_SETTLING
        reconcile(kyma)  # the one it asked for
        return False

    wait_for(mirrored, timeout=60, what="the catalog mirrored")
    assert {c["channel"]: c["version"] for c in release_meta()["spec"]["channels"]} == {
        "regular": "1.0.0",
        "fast": "1.1.0",
    }
    # Every request was the control plane's own identity, and none was refused.
    requests = real_runtime.control_plane_requests()
    assert requests and all(r.code < 400 or r.code == 404 for r in requests), [
        r for r in requests if r.code >= 400
    ]


def test_the_watcher_pod_runs_and_the_kyma_turns_ready(real_runtime, kyma):
    kyma = settled(real_runtime, kyma)

    assert conditions(kyma)["SKRWebhook"] == ("True", "Ready")
    pods = real_runtime.list("v1", "pods", "kyma-system", labels="app=skr-webhook")
    assert [p["status"]["phase"] for p in pods] == ["Running"]
    assert real_runtime.node.process("kyma-system", "skr-webhook") is not None


def test_a_no_op_reconcile_writes_nothing(real_runtime, kyma):
    kyma = settled(real_runtime, kyma)
    periodic(kyma)
    mark = real_runtime.server.audit_mark()

    periodic(kyma)
    reconcile(kyma)  # a full one too

    requests = real_runtime.control_plane_requests(mark)
    assert [r for r in requests if r.write] == []
    assert [r for r in requests if r.read]  # it did look


def test_drift_in_the_runtime_is_corrected_by_the_periodic_reconcile(real_runtime, kyma):
    kyma = settled(real_runtime, kyma)
    deployment = real_runtime.get("apps/v1", "deployments", "skr-webhook", "kyma-system")
    real_runtime.call(
        "PATCH",
        real_runtime.path("apps/v1", "deployments", "skr-webhook", "kyma-system"),
        body={"spec": {"replicas": 0}},
        content_type="application/merge-patch+json",
    )
    real_runtime.call(
        "PATCH",
        real_runtime.path("v1", "configmaps", "keda", "kyma-system"),
        body={"data": {"level": "edited"}},
        content_type="application/merge-patch+json",
    )
    webhooks = real_runtime.get(
        "admissionregistration.k8s.io/v1", "validatingwebhookconfigurations", "skr-webhook"
    )
    real_runtime.call(
        "PUT",
        real_runtime.path(
            "admissionregistration.k8s.io/v1", "validatingwebhookconfigurations", "skr-webhook"
        ),
        body={**webhooks, "webhooks": webhooks["webhooks"][1:]},
    )

    periodic(kyma)

    assert real_runtime.get("apps/v1", "deployments", "skr-webhook", "kyma-system")["spec"]["replicas"] == 1
    assert real_runtime.get("v1", "configmaps", "keda", "kyma-system")["data"] == {"level": "1"}
    restored = real_runtime.get(
        "admissionregistration.k8s.io/v1", "validatingwebhookconfigurations", "skr-webhook"
    )
    assert [w["name"] for w in restored["webhooks"]] == [w["name"] for w in webhooks["webhooks"]]
    assert deployment["spec"]["replicas"] == 1


def test_drift_of_the_catalog_mirror_is_repaired_when_its_recheck_is_due(real_runtime, kyma, settings):
    """A user's edit of a template, a deleted release meta and a stray template of ours (labelled
    as the mirror's): the recheck puts the mirror back as the catalog says."""
    kyma = settled(real_runtime, kyma)
    mirror = "operator.kyma-project.io/v1beta2"
    real_runtime.call(
        "PATCH",
        real_runtime.path(mirror, "moduletemplates", "keda-1.0.0", "kyma-system"),
        body={"spec": {"version": "9.9.9"}},
        content_type="application/merge-patch+json",
    )
    real_runtime.call("DELETE", real_runtime.path(mirror, "modulereleasemetas", "keda", "kyma-system"))
    stray = real_runtime.get(mirror, "moduletemplates", "keda-1.1.0", "kyma-system")
    stray["metadata"] = {"name": "keda-0.9.0", "labels": stray["metadata"]["labels"]}
    real_runtime.call("POST", real_runtime.path(mirror, "moduletemplates", None, "kyma-system"), body=stray)

    periodic(kyma)  # not due yet: the mirror is trusted between rechecks
    assert real_runtime.get(mirror, "modulereleasemetas", "keda", "kyma-system") is None

    settings.RUNTIME_RECHECK_INTERVAL = 0
    periodic(kyma)

    assert (
        real_runtime.get(mirror, "moduletemplates", "keda-1.0.0", "kyma-system")["spec"]["version"] == "1.0.0"
    )
    assert real_runtime.get(mirror, "modulereleasemetas", "keda", "kyma-system") is not None
    names = sorted(t["metadata"]["name"] for t in real_runtime.list(mirror, "moduletemplates", "kyma-system"))
    assert names == ["keda-1.0.0", "keda-1.1.0"]


def test_a_deleted_sync_resource_is_pruned_from_the_runtime(real_runtime, kyma):
    kyma = reconcile(kyma)
    resource = kyma.sync_resources.get(name="keda-config")

    module_services.syncresource_delete(resource=resource)
    reconcile(kyma, full=False)

    assert real_runtime.get("v1", "configmaps", "keda", "kyma-system") is None
    assert not kyma.sync_resources.filter(name="keda-config").exists()


def test_a_rotated_ca_reaches_the_runtime(real_runtime, kyma):
    kyma = settled(real_runtime, kyma)
    before = real_runtime.get("v1", "secrets", "skr-webhook-tls", "kyma-system")["data"]["ca.crt"]

    pki.ca_rotate()
    reconcile(kyma)

    after = real_runtime.get("v1", "secrets", "skr-webhook-tls", "kyma-system")["data"]["ca.crt"]
    assert after != before
    requests = real_runtime.control_plane_requests()
    assert not [r for r in requests if r.code == 403]


def test_a_write_the_runtimes_rbac_refuses_is_a_clear_condition(real_runtime, catalog):
    """A module whose policy allows a namespace the runtime never granted (its rules were not
    rendered into the runtime): the API server refuses, the Kyma says which write and why."""
    module = keda_module()
    module.manifest_namespaces = ["kyma-system", "keda-extra"]
    module.save()
    kyma = connect_kyma(real_runtime)
    manifest = CONFIGMAP.format(name="outside", level=1).replace(
        "namespace: kyma-system", "namespace: keda-extra"
    )
    module_services.syncresource_apply(kyma=kyma, module=module, name="outside", manifests=manifest)

    kyma = reconcile(kyma)

    refused = [r for r in real_runtime.control_plane_requests() if r.code == 403]
    assert refused and refused[0].namespace == "keda-extra"
    assert conditions(kyma)["SyncResources"][0] == "False"
    message = next(c["message"] for c in kyma.conditions if c["type"] == "SyncResources")
    assert "keda-extra" in message and "forbidden" in message.lower(), message


def test_deletion_leaves_nothing_of_ours_in_the_runtime(real_runtime, kyma):
    kyma = settled(real_runtime, kyma)

    kyma_services.kyma_delete(kyma=kyma)
    for _ in range(5):
        reconcile(kyma)
        if not Kyma.objects.filter(pk=kyma.pk).exists():
            break

    assert not Kyma.objects.filter(pk=kyma.pk).exists()
    for api_version, plural, name, namespace in WATCHER_OBJECTS:
        assert real_runtime.get(api_version, plural, name, namespace) is None, (plural, name)
    assert real_runtime.list("networking.k8s.io/v1", "networkpolicies", "kyma-system") == []
    assert real_runtime.get("operator.kyma-project.io/v1beta2", "kymas", "default", "kyma-system") is None
    assert real_runtime.get("operator.kyma-project.io/v1alpha1", "kedas", "default", "kyma-system") is None
    assert real_runtime.get("v1", "configmaps", "keda", "kyma-system") is None
    # The catalog's mirror goes with the Kyma; its CRDs stay, as the Kyma's does (a runtime's
    # users may hold objects of them).
    for plural in ("moduletemplates", "modulereleasemetas"):
        assert real_runtime.list("operator.kyma-project.io/v1beta2", plural, "kyma-system") == [], plural
        crd = f"{plural}.operator.kyma-project.io"
        assert real_runtime.get("apiextensions.k8s.io/v1", "customresourcedefinitions", crd) is not None
    # The controllers then remove the watcher's ReplicaSet and pod (garbage collection).
    wait_for(
        lambda: (
            real_runtime.list("v1", "pods", "kyma-system", labels="app=skr-webhook") == []
            and real_runtime.list("apps/v1", "replicasets", "kyma-system") == []
        ),
        what="the watcher's pods and ReplicaSets garbage-collected",
    )
    assert real_runtime.node.process("kyma-system", "skr-webhook") is None


def test_a_manifest_that_does_not_fit_its_kind_is_the_manifests_problem_not_the_runtimes(
    real_runtime, catalog
):
    """A real API server answers a server-side apply of ``data: {level: 1}`` (a number where a
    ConfigMap holds strings) with 500: the runtime is fine, the manifest is not."""
    kyma = connect_kyma(real_runtime)
    manifest = CONFIGMAP.format(name="typed", level=1).replace('"1"', "1")
    module_services.syncresource_apply(kyma=kyma, module=keda_module(), name="typed", manifests=manifest)

    kyma = reconcile(kyma)

    assert conditions(kyma)["Runtime"] == ("True", "Reachable")
    assert conditions(kyma)["SyncResources"][0] == "False"
    message = next(c["message"] for c in kyma.conditions if c["type"] == "SyncResources")
    assert "expected string" in message, message
