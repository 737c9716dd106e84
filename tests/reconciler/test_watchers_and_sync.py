"""Watcher changes reach every runtime; SyncResources are applied, updated and pruned by strategy."""

from __future__ import annotations

import pytest

from fleet.models import ModuleConfig, SyncResource
from fleet.services import modules as module_services
from pki import services as pki
from tests.reconciler.helpers import CONFIGMAP, conditions, reconcile
from tests.support.runtimes import connected_kyma, keda_module, klm_watcher
from watchers.models import Watcher
from watchers.rendering import MODULE_CRS_WEBHOOK
from watchers.services import watcher_apply, watcher_delete, watchers_finalize

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def catalog():
    pki.ca_bootstrap()
    klm_watcher()
    return keda_module()


def webhooks(runtime) -> list[str]:
    return [
        w["name"]
        for w in runtime.get_object("validatingwebhookconfigurations", "skr-webhook")["webhooks"]
        if w["name"] != MODULE_CRS_WEBHOOK  # the catalog's module CRs, not a Watcher's
    ]


class TestWatchers:
    def test_given_a_new_watcher_when_kymas_reconcile_then_every_runtime_gets_its_webhook(self, runtimes):
        pairs = [(rt := runtimes(), connected_kyma(rt, name=f"k{i}")) for i in range(3)]
        for _, kyma in pairs:
            reconcile(kyma)
        watcher_apply(
            namespace="kcp-system",
            name="keda-watcher",
            manager="keda-manager",
            field="status",
            resource_to_watch={
                "group": "operator.kyma-project.io",
                "version": "v1alpha1",
                "resource": "kedas",
            },
            service_info={"name": "keda-events", "namespace": "kcp-system", "port": 9090},
        )
        for runtime, kyma in pairs:
            reconcile(kyma)
            assert webhooks(runtime) == [
                "kcp-system.keda-watcher.operator.kyma-project.io",
                "kcp-system.klm-watcher.operator.kyma-project.io",
            ]
            hook = runtime.get_object("validatingwebhookconfigurations", "skr-webhook")["webhooks"][0]
            assert hook["rules"][0]["resources"] == ["kedas/status"]

    def test_given_a_deleting_watcher_when_every_runtime_dropped_it_then_it_is_gone(self, runtimes):
        runtime = runtimes()
        kyma = connected_kyma(runtime)
        watcher = Watcher.objects.get(name="klm-watcher")
        watcher.finalizers = ["controlplane.kyma-project.io/runtimes"]
        watcher.save()
        reconcile(kyma)
        watcher_delete(watcher=watcher)
        assert watchers_finalize() == []  # the runtime still has its webhook
        reconcile(kyma)
        assert webhooks(runtime) == []
        assert watchers_finalize() == ["kcp-system/klm-watcher"]


class TestSyncResources:
    def apply(self, kyma, manifests: str, **fields) -> SyncResource:
        resource, _ = module_services.syncresource_apply(
            kyma=kyma, module=keda_module(), name="keda-config", manifests=manifests, **fields
        )
        return resource

    def test_given_add_change_remove_when_reconciled_then_applied_updated_pruned(self, runtimes):
        runtime = runtimes()
        kyma = connected_kyma(runtime)
        self.apply(
            kyma, CONFIGMAP.format(name="a", level="info") + "---\n" + CONFIGMAP.format(name="b", level="x")
        )
        reconcile(kyma)
        assert runtime.get_object("ConfigMap", "a", "kyma-system")["data"] == {"level": "info"}
        status = SyncResource.objects.get().manifest_status
        assert [(e["name"], e["state"]) for e in status] == [("a", "Applied"), ("b", "Applied")]
        self.apply(kyma, CONFIGMAP.format(name="a", level="debug"))
        record = reconcile(kyma)
        assert runtime.get_object("ConfigMap", "a", "kyma-system")["data"] == {"level": "debug"}
        assert runtime.get_object("ConfigMap", "b", "kyma-system") is None
        assert record.runtime_writes >= 2
        assert conditions(kyma)["SyncResources"] == ("True", "Ready")

    def test_given_unchanged_manifests_when_reconciled_then_nothing_is_written(self, runtimes):
        runtime = runtimes()
        kyma = connected_kyma(runtime)
        self.apply(kyma, CONFIGMAP.format(name="a", level="info"))
        reconcile(kyma)
        reconcile(kyma)
        assert reconcile(kyma).runtime_writes == 0

    def test_given_orphan_policy_when_a_manifest_is_removed_then_the_object_stays(self, runtimes):
        runtime = runtimes()
        kyma = connected_kyma(runtime)
        self.apply(
            kyma,
            CONFIGMAP.format(name="a", level="1") + "---\n" + CONFIGMAP.format(name="b", level="2"),
            deletion_policy="Orphan",
        )
        reconcile(kyma)
        self.apply(kyma, CONFIGMAP.format(name="a", level="1"), deletion_policy="Orphan")
        reconcile(kyma)
        assert runtime.get_object("ConfigMap", "b", "kyma-system") is not None

    def test_given_create_only_when_the_object_exists_then_it_is_not_overwritten(self, runtimes):
        runtime = runtimes()
        kyma = connected_kyma(runtime)
        reconcile(kyma)  # creates kyma-system
        runtime.create_as_user(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "a", "namespace": "kyma-system"},
                "data": {"level": "user"},
            }
        )
        self.apply(kyma, CONFIGMAP.format(name="a", level="ours"), apply_strategy="CreateOnly")
        reconcile(kyma)
        assert runtime.get_object("ConfigMap", "a", "kyma-system")["data"] == {"level": "user"}
        assert SyncResource.objects.get().manifest_status[0]["state"] == "Applied"

    def test_given_read_only_when_the_object_is_missing_then_failed_and_the_module_errors(self, runtimes):
        kyma = connected_kyma(runtimes())
        self.apply(kyma, CONFIGMAP.format(name="ghost", level="x"), apply_strategy="ReadOnly")
        reconcile(kyma)
        entry = SyncResource.objects.get().manifest_status[0]
        assert entry["state"] == "Failed" and "not found" in entry["message"]
        assert kyma.state == "Error"
        assert conditions(kyma)["SyncResources"] == ("False", "ApplyFailed")

    def test_given_a_manifest_the_runtime_rejects_when_reconciled_then_failed_with_the_reason(self, runtimes):
        kyma = connected_kyma(runtimes())
        keda = keda_module()
        keda.manifest_kinds = [{"group": "example.com", "kind": "Unknown"}]  # the policy lets it through
        module_services.module_save(module=keda)
        self.apply(
            kyma, "apiVersion: example.com/v1\nkind: Unknown\nmetadata: {name: x, namespace: kyma-system}\n"
        )
        reconcile(kyma)
        entry = SyncResource.objects.get().manifest_status[0]
        assert entry["state"] == "Failed" and "does not serve Unknown" in entry["message"]

    def test_given_a_deleted_sync_resource_when_reconciled_then_its_objects_are_pruned(self, runtimes):
        runtime = runtimes()
        kyma = connected_kyma(runtime)
        resource = self.apply(kyma, CONFIGMAP.format(name="a", level="1"))
        reconcile(kyma)
        module_services.syncresource_delete(resource=SyncResource.objects.get(pk=resource.pk))
        assert SyncResource.objects.filter(pk=resource.pk).exists()  # waits for the cleanup
        reconcile(kyma)
        assert runtime.get_object("ConfigMap", "a", "kyma-system") is None
        assert not SyncResource.objects.filter(pk=resource.pk).exists()


class TestModules:
    def test_given_the_manager_reports_ready_when_reconciled_then_the_kyma_is_ready(self, runtimes):
        kyma = connected_kyma(runtimes())
        reconcile(kyma)
        assert kyma.state == "Processing"
        module_services.moduleconfig_set_status(
            config=ModuleConfig.objects.get(kyma=kyma), status={"state": "Ready"}
        )
        reconcile(kyma)
        assert kyma.state == "Ready"

    def test_given_the_module_cr_reports_a_warning_when_reconciled_then_the_kyma_warns(self, runtimes):
        runtime = runtimes()
        kyma = connected_kyma(runtime)
        reconcile(kyma)
        runtime.apply_as_user(
            {
                "apiVersion": "operator.kyma-project.io/v1alpha1",
                "kind": "Keda",
                "metadata": {"name": "default", "namespace": "kyma-system"},
                "status": {"state": "Warning"},
            },
            subresource="status",
        )
        reconcile(kyma)
        assert kyma.state == "Warning"

    def test_given_a_module_not_in_the_catalog_when_reconciled_then_error(self, runtimes):
        kyma = connected_kyma(runtimes(), modules=[{"name": "nope"}])
        reconcile(kyma)
        assert kyma.state == "Error"
        assert conditions(kyma)["ModuleCatalog"] == ("False", "ModuleNotInCatalog")

    def test_given_policy_ignore_when_reconciled_then_no_cr_is_created(self, runtimes):
        runtime = runtimes()
        kyma = connected_kyma(runtime, modules=[{"name": "keda", "customResourcePolicy": "Ignore"}])
        reconcile(kyma)
        assert runtime.get_object("Keda", "default", "kyma-system") is None

    def test_given_a_changed_module_cr_when_reconciled_then_the_config_revision_moves_once(self, runtimes):
        runtime = runtimes()
        kyma = connected_kyma(runtime)
        reconcile(kyma)
        first = ModuleConfig.objects.get(kyma=kyma).revision
        runtime.edit_as_user("Keda", "default", lambda obj: obj["spec"].update(replicas=3), "kyma-system")
        reconcile(kyma)
        reconcile(kyma)
        config = ModuleConfig.objects.get(kyma=kyma)
        assert config.spec == {"replicas": 3}
        assert config.revision > first and config.generation == 2

    def test_given_a_removed_module_when_reconciled_then_its_cr_and_config_go(self, runtimes):
        runtime = runtimes()
        kyma = connected_kyma(runtime)
        reconcile(kyma)
        kyma.modules = []
        from fleet.services.kymas import kyma_save

        kyma_save(kyma=kyma)
        reconcile(kyma)
        assert runtime.get_object("Keda", "default", "kyma-system") is None
        assert not ModuleConfig.objects.filter(kyma=kyma).exists()
