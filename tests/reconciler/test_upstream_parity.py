"""What upstream's lifecycle-manager does that we now do too (issue 33), against an emulated
runtime: mandatory modules, no downgrades, the purge of a Kyma stuck in deletion, forgetting a
runtime gone for good, the whole status in the runtime's Kyma, and a full reconcile that repairs
every kind the control plane owns (the kube tier has the same against a real API server)."""

from __future__ import annotations

import pytest
from django.utils import timezone

from fleet import queue
from fleet.models import FleetCounter, Kyma, KymaState, Module, ModuleConfig
from fleet.models.records import PURGES
from fleet.queue import StoredChange
from fleet.resources.kinds import KymaKind
from fleet.services import kymas as kyma_services
from fleet.services import modules as module_services
from fleet.services.deletion import kyma_forget_runtime
from kernel import audit
from kernel.errors import Conflict
from kernel.models import AuditEntry
from pki import services as pki
from reconciler.run import kyma_reconcile_run
from tests.reconciler.helpers import conditions, reconcile
from tests.reconciler.test_maintenance_windows import CLOSED, policy_with_window, store_policy
from tests.support.runtimes import connected_kyma, keda_module, klm_watcher
from watchers.rendering import NETWORK_POLICIES, PRIORITY_CLASS_NAME

pytestmark = pytest.mark.django_db
FOREIGN_FINALIZER = "example.com/operator-cleanup"


@pytest.fixture
def catalog() -> Module:
    pki.ca_bootstrap()
    klm_watcher()
    return keda_module()


def serverless(*, mandatory: bool = True) -> Module:
    module, _ = module_services.module_apply(
        name="serverless",
        mandatory=mandatory,
        channels={"regular": "1.0.0", "fast": "1.2.0"},
        cr_group="operator.kyma-project.io",
        cr_version="v1alpha1",
        cr_kind="Keda",  # (the test catalog's CRD: any kind of Kyma's group will do)
        cr_plural="kedas",
        cr_name="serverless",
    )
    return module


def run(kyma: Kyma, *, full: bool, reason: str = "test", change: StoredChange | None = None) -> Kyma:
    now = timezone.now()
    if change is not None:
        queue.request_one(kyma.pk, countdown=0, change=change)
    else:
        queue.flags().claim([kyma.pk], now, now, full=full)
    kyma_reconcile_run(kyma.pk, reason=reason)
    kyma.refresh_from_db()
    return kyma


class TestMandatoryModules:
    def test_given_a_mandatory_module_then_a_kyma_that_does_not_list_it_gets_it_unlisted(
        self, runtimes, catalog
    ):
        runtime = runtimes()
        kyma = connected_kyma(runtime)  # spec.modules: keda only
        serverless()

        reconcile(kyma)

        cr = runtime.get_object("Keda", "serverless", "kyma-system")
        assert cr["metadata"]["labels"]["operator.kyma-project.io/mandatory-module"] == "true"
        assert (
            ModuleConfig.objects.get(kyma=kyma, module__name="serverless").version == "1.2.0"
        )  # the highest
        assert [m["name"] for m in kyma.module_status] == ["keda"]  # not in the status (upstream)
        assert "serverless" in kyma.owned_module_resources
        # Not mirrored into the runtime's catalog either: no user chooses it there.
        assert runtime.get_object("ModuleReleaseMeta", "serverless", "kyma-system") is None

    def test_given_a_kyma_that_lists_a_mandatory_module_then_that_entry_is_a_warning(self, runtimes, catalog):
        serverless()
        kyma = connected_kyma(runtimes(), modules=[{"name": "keda"}, {"name": "serverless"}])

        reconcile(kyma)

        entry = next(m for m in kyma.module_status if m["name"] == "serverless")
        assert entry["state"] == "Warning" and "mandatory" in entry["message"]
        assert ModuleConfig.objects.filter(kyma=kyma, module__name="serverless").count() == 1

    def test_given_a_mandatory_module_removed_from_the_catalog_then_it_leaves_every_runtime_first(
        self, runtimes, catalog
    ):
        first, second = runtimes(), runtimes()
        kymas = [connected_kyma(first, name="k1"), connected_kyma(second, name="k2")]
        module = serverless()
        for kyma in kymas:
            reconcile(kyma)

        module_services.module_delete(module=module)

        module.refresh_from_db()
        assert module.is_deleting  # held until no runtime holds it (upstream's finalizer)
        reconcile(kymas[0])
        assert first.get_object("Keda", "serverless", "kyma-system") is None
        assert Module.objects.filter(name="serverless").exists()  # the second runtime holds it still
        reconcile(kymas[1])
        assert second.get_object("Keda", "serverless", "kyma-system") is None
        assert not Module.objects.filter(name="serverless").exists()
        assert not ModuleConfig.objects.filter(module__name="serverless").exists()

    def test_given_no_runtime_holds_a_mandatory_module_then_it_is_deleted_at_once(self, catalog):
        module = serverless()

        module_services.module_delete(module=module)

        assert not Module.objects.filter(name="serverless").exists()


class TestNoDowngrades:
    def test_given_a_channel_switch_to_a_lower_version_then_it_is_refused_with_upstreams_warning(
        self, runtimes, catalog
    ):
        kyma = connected_kyma(runtimes(), channel="fast")
        reconcile(kyma)
        assert ModuleConfig.objects.get(kyma=kyma).version == "1.1.0"

        kyma.channel = "regular"  # keda 1.0.0 there
        kyma_services.kyma_save(kyma=kyma)
        reconcile(kyma)

        assert ModuleConfig.objects.get(kyma=kyma).version == "1.1.0"  # the runtime keeps its version
        keda = next(m for m in kyma.module_status if m["name"] == "keda")
        assert (keda["state"], keda["version"], keda["channel"]) == ("Warning", "1.1.0", "fast")
        assert keda["message"] == (
            "module template update not allowed: ignore channel skew (from fast to regular), "
            "as a higher version (1.1.0) of the module was previously installed"
        )
        assert kyma.state == KymaState.WARNING

    def test_given_the_catalog_lowering_a_channel_then_the_runtime_keeps_its_version(self, runtimes, catalog):
        kyma = connected_kyma(runtimes())
        reconcile(kyma)
        catalog.channels = {"regular": "0.9.0", "fast": "1.1.0"}
        module_services.module_save(module=catalog)

        reconcile(kyma)

        assert ModuleConfig.objects.get(kyma=kyma).version == "1.0.0"
        assert next(m for m in kyma.module_status if m["name"] == "keda")["state"] == "Warning"

    def test_given_a_higher_version_then_it_is_an_upgrade(self, runtimes, catalog):
        kyma = connected_kyma(runtimes())
        reconcile(kyma)
        kyma.channel = "fast"
        kyma_services.kyma_save(kyma=kyma)

        reconcile(kyma)

        assert ModuleConfig.objects.get(kyma=kyma).version == "1.1.0"


class TestPurge:
    def deleting(self, runtime, settings) -> Kyma:
        kyma = connected_kyma(runtime)
        reconcile(kyma)
        runtime.edit_as_user(
            "Keda",
            "default",
            lambda obj: obj["metadata"].update(finalizers=[FOREIGN_FINALIZER]),
            "kyma-system",
        )
        kyma_services.kyma_delete(kyma=kyma)
        return kyma

    def test_given_a_cr_a_finalizer_holds_then_the_deletion_waits_and_says_when_the_purge_starts(
        self, runtimes, catalog, settings
    ):
        runtime = runtimes()
        kyma = self.deleting(runtime, settings)

        reconcile(kyma)

        assert kyma.state == KymaState.DELETING
        assert conditions(kyma)["Deletion"] == ("False", "WaitingForFinalizers")
        message = next(c["message"] for c in kyma.conditions if c["type"] == "Deletion")
        assert "Keda kyma-system/default" in message and "purge starts" in message
        # The module's operator (its SyncResources' objects) and the watcher stay meanwhile.
        assert runtime.get_object("Deployment", "skr-webhook", "kyma-system") is not None
        assert kyma.owned_module_resources["keda"]["name"] == "default"

    def test_given_the_grace_period_over_then_the_finalizers_are_removed_and_the_deletion_completes(
        self, runtimes, catalog, settings
    ):
        runtime = runtimes()
        kyma = self.deleting(runtime, settings)
        reconcile(kyma)
        settings.KYMA_PURGE_AFTER = 0

        record = reconcile(kyma)

        assert conditions(kyma)["Deletion"] == ("False", "Purged")
        assert "Keda kyma-system/default purged (finalizers removed)" in record.change_lines()
        assert runtime.get_object("Keda", "default", "kyma-system") is None
        assert FleetCounter.objects.get(name=PURGES).total == 1
        assert reconcile(kyma) is None  # the next reconcile finishes the deletion
        assert not Kyma.objects.filter(pk=kyma.pk).exists()
        assert runtime.get_object("Deployment", "skr-webhook", "kyma-system") is None

    def test_given_the_kind_in_kyma_purge_skip_then_it_is_never_purged(self, runtimes, catalog, settings):
        runtime = runtimes()
        kyma = self.deleting(runtime, settings)
        settings.KYMA_PURGE_AFTER = 0
        settings.KYMA_PURGE_SKIP = ["*.operator.kyma-project.io"]

        reconcile(kyma)

        assert conditions(kyma)["Deletion"] == ("False", "WaitingForFinalizers")
        assert runtime.get_object("Keda", "default", "kyma-system")["metadata"]["finalizers"] == [
            FOREIGN_FINALIZER
        ]


class TestForgetRuntime:
    def test_given_a_runtime_gone_for_good_then_an_operator_forgets_it_and_the_trail_says_so(
        self, runtimes, catalog, emulator_host
    ):
        runtime = runtimes()
        kyma = connected_kyma(runtime)
        reconcile(kyma)
        emulator_host.remove(runtime)  # gone for good
        kyma_services.kyma_delete(kyma=kyma)
        reconcile(kyma)
        assert conditions(kyma)["Runtime"] == ("False", "CleanupFailed")

        with audit.acting(audit.command_actor("test")):
            assert kyma_forget_runtime(kyma=kyma, reason="cluster destroyed") is True

        assert not Kyma.objects.filter(pk=kyma.pk).exists()
        entry = AuditEntry.objects.get(action="forget-runtime")
        assert (entry.kind, entry.name, entry.reason, entry.kyma_id) == (
            "Kyma",
            kyma.name,
            "cluster destroyed",
            kyma.pk,
        )

    def test_given_a_kyma_not_being_deleted_then_forgetting_its_runtime_is_refused(self, runtimes, catalog):
        kyma = connected_kyma(runtimes())
        with pytest.raises(Conflict, match="delete it first"):
            kyma_forget_runtime(kyma=kyma)
        assert Kyma.objects.filter(pk=kyma.pk).exists()


class TestFullReconcile:
    @pytest.fixture
    def drifted(self, runtimes, catalog):
        """A settled runtime whose NetworkPolicy was edited, the watcher Service's selector
        changed and the PriorityClass deleted (issue 33's report)."""
        runtime = runtimes()
        kyma = connected_kyma(runtime)
        reconcile(kyma)
        reconcile(kyma)
        policy = NETWORK_POLICIES[0]
        runtime.edit_as_user(
            "NetworkPolicy", policy, lambda obj: obj["spec"].update(ingress=[]), "kyma-system"
        )
        runtime.edit_as_user(
            "Service", "skr-webhook", lambda obj: obj["spec"].update(selector={"app": "other"}), "kyma-system"
        )
        before = runtime.get_object("PriorityClass", PRIORITY_CLASS_NAME)
        runtime.delete_as_user("PriorityClass", PRIORITY_CLASS_NAME)
        # What our runtime watcher reports of the deletion (its webhook for owned objects).
        deleted = StoredChange(
            "scheduling.k8s.io/v1",
            "PriorityClass",
            "",
            PRIORITY_CLASS_NAME,
            "DELETE",
            before["metadata"]["uid"],
            before["metadata"]["resourceVersion"],
        )
        return kyma, runtime, deleted

    def repaired(self, runtime) -> bool:
        return (
            runtime.get_object("PriorityClass", PRIORITY_CLASS_NAME) is not None
            and runtime.get_object("Service", "skr-webhook", "kyma-system")["spec"]["selector"]
            == {"app": "skr-webhook"}
            and runtime.get_object("NetworkPolicy", NETWORK_POLICIES[0], "kyma-system")["spec"]["ingress"]
            != []
        )

    def test_given_drift_of_rechecked_kinds_then_reconcile_now_repairs_every_one(self, drifted):
        kyma, runtime, _ = drifted
        run(kyma, full=False, reason=queue.PERIODIC_REASON)
        assert not self.repaired(runtime)  # the periodic one stays light: not due yet

        run(kyma, full=True)  # "Reconcile now"

        assert self.repaired(runtime)

    def test_given_the_watcher_reports_a_deleted_priority_class_then_its_reconcile_repairs_every_kind(
        self, drifted
    ):
        kyma, runtime, change = drifted

        run(kyma, full=False, reason="watch-event", change=change)

        assert self.repaired(runtime)


def test_given_a_version_waiting_for_its_window_then_the_runtimes_kyma_says_maintenance_true(
    runtimes, catalog
):
    """The whole status in the runtime (upstream copies it): a module waiting for the runtime's
    maintenance window shows ``maintenance: true`` in the runtime's Kyma too."""
    runtime = runtimes()
    catalog.versions = [{"version": "1.1.0", "requiresDowntime": True}]
    module_services.module_save(module=catalog)
    kyma = connected_kyma(runtime)
    reconcile(kyma)
    store_policy(policy_with_window(*CLOSED))
    catalog.refresh_from_db()
    catalog.channels = {**catalog.channels, "regular": "1.1.0"}
    module_services.module_save(module=catalog)

    reconcile(kyma)

    status = runtime.get_object("Kyma", "default", "kyma-system")["status"]
    keda = next(m for m in status["modules"] if m["name"] == "keda")
    assert (keda["version"], keda["maintenance"]) == ("1.0.0", True)
    assert "waiting for the next maintenance window" in keda["message"]
    assert status == KymaKind().to_document(kyma)["status"]


def test_given_upstreams_fields_left_on_an_object_in_place_then_the_next_reconcile_takes_them_over(
    runtimes, catalog
):
    """A take-over a busy controller kept failing (the Deployment's status moving under every
    guarded write) leaves the object with our hash and upstream's fields: the next reconcile,
    finding them, takes them over instead of counting the object as in place."""
    runtime = runtimes()
    kyma = connected_kyma(runtime)
    reconcile(kyma)
    deployment = runtime.get_object("Deployment", "skr-webhook", "kyma-system")
    runtime.apply_as_user(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": "skr-webhook",
                "namespace": "kyma-system",
                "labels": {"upstream-left": "this"},
            },
        },
        field_manager="lifecycle-manager",
    )
    held = runtime.get_object("Deployment", "skr-webhook", "kyma-system")
    assert "lifecycle-manager" in {e["manager"] for e in held["metadata"]["managedFields"]}
    assert held["metadata"]["annotations"] == deployment["metadata"]["annotations"]  # our hash stays

    run(kyma, full=True)

    taken = runtime.get_object("Deployment", "skr-webhook", "kyma-system")
    assert "lifecycle-manager" not in {e["manager"] for e in taken["metadata"]["managedFields"]}
    assert "upstream-left" not in taken["metadata"]["labels"]  # only upstream set it: pruned
