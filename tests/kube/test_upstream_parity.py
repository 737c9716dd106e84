"""Upstream's behaviours against real API servers, under the least-privilege identity of
deploy/runtime-access/ (issue 33): a mandatory module reaches a Kyma that does not list it and
leaves every runtime when it leaves the catalog; a Kyma whose runtime holds a CR with a foreign
finalizer is purged after the grace period; a downgrade through a channel switch is refused; a
reconcile of a runtime with 500 objects never exceeds the client's rate; the runtime's Kyma
shows ``maintenance: true`` while a module waits for its window; and "Reconcile now" repairs
every kind the control plane owns there."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

import pytest
from django.utils import timezone

from fleet import queue
from fleet.models import Kyma, MaintenancePolicy, Module, ModuleConfig
from fleet.services import kymas as kyma_services
from fleet.services import modules as module_services
from pki import services as pki
from reconciler.run import kyma_reconcile_run
from runtime_emulator import crd_manifest
from tests.kube.test_reconcile import settled
from tests.support.kube import Runtime, connect_kyma
from tests.support.runtimes import keda_module, klm_watcher
from watchers.rendering import NETWORK_POLICIES, PRIORITY_CLASS_NAME

pytestmark = pytest.mark.django_db
MODULES = "operator.kyma-project.io/v1alpha1"
SERVERLESS_CRD = crd_manifest(
    "operator.kyma-project.io", "Serverless", plural="serverlesses", versions=("v1alpha1",)
)
FOREIGN_FINALIZER = "example.com/operator-cleanup"


def reconcile(kyma: Kyma, *, full: bool = True, reason: str = "test") -> Kyma:
    now = timezone.now()
    queue.flags().claim([kyma.pk], now, now, full=full)
    kyma_reconcile_run(kyma.pk, reason=reason)
    if Kyma.objects.filter(pk=kyma.pk).exists():
        kyma.refresh_from_db()
    return kyma


def module_status(kyma: Kyma, name: str) -> dict:
    return next(m for m in kyma.module_status if m["name"] == name)


@pytest.fixture
def catalog() -> Module:
    pki.ca_bootstrap()
    klm_watcher()
    return keda_module()


@pytest.fixture
def second_runtime(runtime_pool) -> Iterator[Runtime]:
    runtime = runtime_pool.take()
    try:
        yield runtime
    finally:
        runtime_pool.release(runtime)


def serverless() -> Module:
    module, _ = module_services.module_apply(
        name="serverless",
        mandatory=True,
        channels={"regular": "1.0.0", "fast": "1.2.0"},
        cr_group="operator.kyma-project.io",
        cr_version="v1alpha1",
        cr_kind="Serverless",
        cr_plural="serverlesses",
    )
    return module


def test_a_mandatory_module_reaches_a_kyma_that_does_not_list_it_and_leaves_every_runtime(
    real_runtime, second_runtime, catalog
):
    runtimes = (real_runtime, second_runtime)
    kymas = []
    for index, runtime in enumerate(runtimes):
        runtime.register_crd(SERVERLESS_CRD)
        kymas.append(connect_kyma(runtime, name=f"k{index}"))  # spec.modules: keda only
    module = serverless()

    for kyma, runtime in zip(kymas, runtimes, strict=True):
        kyma = reconcile(kyma)
        cr = runtime.get(MODULES, "serverlesses", "default", "kyma-system")
        assert cr["metadata"]["labels"]["operator.kyma-project.io/mandatory-module"] == "true"
        assert [m["name"] for m in kyma.module_status] == ["keda"]  # not listed (upstream)
        runtime_kyma = runtime.get("operator.kyma-project.io/v1beta2", "kymas", "default", "kyma-system")
        assert [m["name"] for m in runtime_kyma["status"]["modules"]] == ["keda"]

    module_services.module_delete(module=module)
    assert Module.objects.get(name="serverless").is_deleting  # held while a runtime holds it

    for kyma, runtime in zip(kymas, runtimes, strict=True):
        reconcile(kyma)
        assert runtime.get(MODULES, "serverlesses", "default", "kyma-system") is None
    assert not Module.objects.filter(name="serverless").exists()
    requests = [r for runtime in runtimes for r in runtime.control_plane_requests()]
    assert not [r for r in requests if r.code == 403]


def test_a_kyma_whose_runtime_holds_a_cr_with_a_foreign_finalizer_is_purged_after_the_grace_period(
    real_runtime, catalog, settings
):
    kyma = reconcile(connect_kyma(real_runtime))
    real_runtime.call(
        "PATCH",
        real_runtime.path(MODULES, "kedas", "default", "kyma-system"),
        body={"metadata": {"finalizers": [FOREIGN_FINALIZER]}},
        content_type="application/merge-patch+json",
    )
    kyma_services.kyma_delete(kyma=kyma)

    kyma = reconcile(kyma)  # within the grace period: it waits, and says until when

    deletion = next(c for c in kyma.conditions if c["type"] == "Deletion")
    assert deletion["reason"] == "WaitingForFinalizers" and "purge starts" in deletion["message"]
    held = real_runtime.get(MODULES, "kedas", "default", "kyma-system")
    assert held["metadata"]["deletionTimestamp"] and held["metadata"]["finalizers"] == [FOREIGN_FINALIZER]
    assert real_runtime.get("apps/v1", "deployments", "skr-webhook", "kyma-system") is not None

    settings.KYMA_PURGE_AFTER = 0  # the grace period is over
    kyma = reconcile(kyma)
    assert next(c for c in kyma.conditions if c["type"] == "Deletion")["reason"] == "Purged"
    assert real_runtime.get(MODULES, "kedas", "default", "kyma-system") is None
    for _ in range(3):
        reconcile(kyma)
        if not Kyma.objects.filter(pk=kyma.pk).exists():
            break

    assert not Kyma.objects.filter(pk=kyma.pk).exists()
    assert real_runtime.get("apps/v1", "deployments", "skr-webhook", "kyma-system") is None
    assert real_runtime.get("operator.kyma-project.io/v1beta2", "kymas", "default", "kyma-system") is None
    assert not [r for r in real_runtime.control_plane_requests() if r.code == 403]


def test_a_downgrade_through_a_channel_switch_is_refused(real_runtime, catalog):
    kyma = reconcile(connect_kyma(real_runtime, channel="fast"))
    assert ModuleConfig.objects.get(kyma=kyma).version == "1.1.0"

    kyma.channel = "regular"  # keda 1.0.0 there
    kyma_services.kyma_save(kyma=kyma)
    kyma = reconcile(kyma)

    assert ModuleConfig.objects.get(kyma=kyma).version == "1.1.0"
    keda = module_status(kyma, "keda")
    assert (keda["state"], keda["version"]) == ("Warning", "1.1.0")
    assert keda["message"].startswith(
        "module template update not allowed: ignore channel skew (from fast to regular)"
    )
    runtime_kyma = real_runtime.get("operator.kyma-project.io/v1beta2", "kymas", "default", "kyma-system")
    assert module_status_in(runtime_kyma, "keda")["state"] == "Warning"


def module_status_in(runtime_kyma: dict, name: str) -> dict:
    return next(m for m in runtime_kyma["status"]["modules"] if m["name"] == name)


def test_the_runtimes_kyma_shows_maintenance_true_while_a_module_waits(real_runtime, catalog):
    catalog.versions = [{"version": "1.1.0", "requiresDowntime": True}]
    module_services.module_save(module=catalog)
    kyma = reconcile(connect_kyma(real_runtime))
    later = timezone.now() + dt.timedelta(hours=3)
    window = {
        "days": ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"],
        "begin": later.strftime("%H:00:00+00:00"),
        "end": (later + dt.timedelta(hours=1)).strftime("%H:00:00+00:00"),
    }
    MaintenancePolicy.objects.create(policy={"rules": [], "default": window})
    catalog.refresh_from_db()
    catalog.channels = {**catalog.channels, "regular": "1.1.0"}
    module_services.module_save(module=catalog)

    kyma = reconcile(kyma)

    runtime_kyma = real_runtime.get("operator.kyma-project.io/v1beta2", "kymas", "default", "kyma-system")
    keda = module_status_in(runtime_kyma, "keda")
    assert (keda["version"], keda["maintenance"]) == ("1.0.0", True)
    assert "waiting for the next maintenance window" in keda["message"]
    assert runtime_kyma["status"]["lastOperation"] == kyma.last_operation
    assert [c["type"] for c in runtime_kyma["status"]["conditions"]] == [c["type"] for c in kyma.conditions]


def test_reconcile_now_repairs_every_kind_the_periodic_one_leaves_to_its_recheck(real_runtime, catalog):
    # Settled: the watcher's pod ready (without one, every reconcile reads the watcher's objects).
    kyma = settled(real_runtime, connect_kyma(real_runtime))
    policy = NETWORK_POLICIES[0]
    real_runtime.call(
        "PATCH",
        real_runtime.path("networking.k8s.io/v1", "networkpolicies", policy, "kyma-system"),
        body={"spec": {"ingress": []}},
        content_type="application/merge-patch+json",
    )
    real_runtime.call(
        "PATCH",
        real_runtime.path("v1", "services", "skr-webhook", "kyma-system"),
        body={"spec": {"selector": {"app": "other"}}},
        content_type="application/merge-patch+json",
    )
    real_runtime.call(
        "DELETE", real_runtime.path("scheduling.k8s.io/v1", "priorityclasses", PRIORITY_CLASS_NAME)
    )

    def repaired() -> bool:
        service = real_runtime.get("v1", "services", "skr-webhook", "kyma-system")
        netpol = real_runtime.get("networking.k8s.io/v1", "networkpolicies", policy, "kyma-system")
        return (
            real_runtime.get("scheduling.k8s.io/v1", "priorityclasses", PRIORITY_CLASS_NAME) is not None
            and service["spec"]["selector"] == {"app": "skr-webhook"}
            and netpol["spec"].get("ingress") not in (None, [])
        )

    mark = real_runtime.server.audit_mark()
    reconcile(kyma, full=False, reason=queue.PERIODIC_REASON)
    light = [r for r in real_runtime.control_plane_requests(mark) if r.read]
    assert not repaired() and not [r for r in light if r.resource in ("priorityclasses", "networkpolicies")]

    reconcile(kyma, full=True)  # a user's "Reconcile now"

    assert repaired()


def test_a_reconcile_of_a_runtime_with_500_objects_never_exceeds_the_rate(real_runtime, catalog, settings):
    """Upstream's SKR client limits (50 requests a second, bursts of 100), as the API server saw
    the requests arrive: any k of them within t seconds number at most 100 + 50 t (two of slack:
    the server stamps arrival, and the network may bunch two requests sent apart)."""
    assert (settings.RUNTIME_CLIENT_QPS, settings.RUNTIME_CLIENT_BURST) == (50, 100)
    kyma = connect_kyma(real_runtime)
    manifests = "".join(
        f"---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: many-{i:03d}, namespace: kyma-system}}\n"
        f"data: {{i: '{i}'}}\n"
        for i in range(500)
    )
    module_services.syncresource_apply(kyma=kyma, module=catalog, name="many", manifests=manifests)
    mark = real_runtime.server.audit_mark()

    kyma = reconcile(kyma)

    assert (
        len(
            real_runtime.list(
                "v1", "configmaps", "kyma-system", labels="operator.kyma-project.io/managed-by=kyma"
            )
        )
        >= 500
    )
    stamps = sorted(r.at for r in real_runtime.control_plane_requests(mark))
    assert len(stamps) > 500
    worst = max(
        j - i + 1 - 50 * (stamps[j] - stamps[i]) for i in range(len(stamps)) for j in range(i, len(stamps))
    )
    assert worst <= 100 + 2, f"{worst:.1f} requests beyond 50/s in some span"
    assert not [r for r in real_runtime.control_plane_requests(mark) if r.code == 403]
