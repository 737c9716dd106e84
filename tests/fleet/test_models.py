"""Model rules: every rule has a case that breaks it, checked through the shared services."""

from __future__ import annotations

import pytest
from django.db import connection

from fleet.models import Kyma, ModuleConfig, SyncResource
from fleet.services import kymas, modules
from kernel.errors import Conflict, ValidationFailed
from tests.factories import KymaFactory, ModuleFactory, SyncResourceFactory

pytestmark = pytest.mark.django_db


def apply_kyma(**overrides):
    fields = {"namespace": "kcp-system", "name": "k1", "runtime_id": "rt-1", "skr_domain": "k1.example.com"}
    return kymas.kyma_apply(**{**fields, **overrides})


def error_fields(exc: ValidationFailed) -> dict[str, str]:
    return dict(exc.errors)


class TestKymaRules:
    def test_given_minimal_fields_when_applied_then_upstream_defaults_are_written(self):
        kyma, created = apply_kyma(modules=[{"name": "keda"}])
        assert created
        assert kyma.namespace == "kcp-system"
        assert kyma.channel == "regular"
        assert kyma.modules == [{"customResourcePolicy": "CreateAndDelete", "managed": True, "name": "keda"}]
        assert kyma.generation == 1

    @pytest.mark.parametrize(
        ("channel", "reason"),
        [
            ("none", "reserved"),
            ("ab", "at least 3"),
            ("a" * 33, "at most 32"),
            ("Fast", "lower-case"),
            ("fast1", "lower-case"),
        ],
    )
    def test_given_bad_channel_when_applied_then_channel_is_named(self, channel, reason):
        with pytest.raises(ValidationFailed) as failure:
            apply_kyma(channel=channel)
        assert reason in error_fields(failure.value)["channel"]

    @pytest.mark.parametrize("name", ["Upper", "under_score", "-dash", "a" * 254, "dot..dot"])
    def test_given_bad_name_when_applied_then_name_is_rejected(self, name):
        with pytest.raises(ValidationFailed) as failure:
            apply_kyma(name=name)
        assert "name" in error_fields(failure.value)

    @pytest.mark.parametrize("runtime_id", ["", "has space", "a" * 65, "-leading"])
    def test_given_bad_runtime_id_when_applied_then_it_is_rejected(self, runtime_id):
        with pytest.raises(ValidationFailed) as failure:
            apply_kyma(runtime_id=runtime_id)
        assert "runtime_id" in error_fields(failure.value)

    def test_given_taken_runtime_id_when_another_kyma_uses_it_then_uniqueness_is_reported(self):
        apply_kyma()
        with pytest.raises(ValidationFailed) as failure:
            apply_kyma(name="k2")
        assert "already exists" in error_fields(failure.value)["runtime_id"]

    def test_given_bad_skr_domain_when_applied_then_it_is_rejected(self):
        with pytest.raises(ValidationFailed) as failure:
            apply_kyma(skr_domain="not a domain")
        assert "skr_domain" in error_fields(failure.value)

    def test_given_no_skr_domain_when_applied_then_it_is_accepted_for_later_error_reporting(self):
        kyma, _ = apply_kyma(skr_domain="")
        assert kyma.skr_domain == ""

    @pytest.mark.parametrize(
        ("modules_", "needle"),
        [
            ([{"name": "keda"}, {"name": "keda"}], "modules[1].name: duplicate module 'keda'"),
            ([{"name": "keda", "customResourcePolicy": "Sometimes"}], "modules[0].customResourcePolicy"),
            ([{"name": "keda", "managed": "yes"}], "modules[0].managed: expected boolean"),
            ([{"name": "keda", "channel": "none"}], "modules[0].channel"),
            ([{"channel": "fast"}], "modules[0].name: required field is missing"),
            ([{"name": "keda", "colour": "blue"}], "modules[0].colour: unknown field"),
            ({"name": "keda"}, "expected array"),
        ],
    )
    def test_given_bad_modules_when_applied_then_the_path_is_precise(self, modules_, needle):
        with pytest.raises(ValidationFailed) as failure:
            apply_kyma(modules=modules_)
        assert any(needle in reason for field, reason in failure.value.errors if field == "modules"), (
            failure.value.errors
        )

    @pytest.mark.parametrize(
        "labels",
        [{"bad key": "x"}, {"a/b/c": "x"}, {"ok": "bad value!"}, {"ok": "x" * 64}, {"ok": 1}],
    )
    def test_given_bad_labels_when_applied_then_they_are_rejected(self, labels):
        with pytest.raises(ValidationFailed) as failure:
            apply_kyma(labels=labels)
        assert "labels" in error_fields(failure.value)

    def test_given_spec_change_when_applied_then_generation_grows_only_then(self):
        kyma, _ = apply_kyma()
        apply_kyma()
        kyma.refresh_from_db()
        assert kyma.generation == 1
        apply_kyma(channel="fast")
        kyma.refresh_from_db()
        assert kyma.generation == 2
        Kyma.objects.filter(pk=kyma.pk).update(state="Ready", conditions=[{"type": "A", "status": "True"}])
        apply_kyma(channel="fast")
        kyma.refresh_from_db()
        assert kyma.generation == 2

    def test_given_kubeconfig_when_stored_then_the_database_holds_ciphertext_only(self):
        kyma, _ = apply_kyma()
        secret_text = (
            "apiVersion: v1\nclusters: [{name: c, cluster: {server: 'https://10.0.0.1'}}]\n"
            "contexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n"
            "users: [{name: u, user: {token: s3cr3t-token}}]\n"
        )
        kymas.kyma_set_kubeconfig(kyma=kyma, kubeconfig=secret_text)
        with connection.cursor() as cursor:
            cursor.execute("SELECT kubeconfig FROM controlplane_kyma WHERE id = %s", [kyma.pk])
            stored = cursor.fetchone()[0]
        assert "s3cr3t-token" not in stored and "clusters" not in stored
        fresh = Kyma.objects.get(pk=kyma.pk)
        assert "s3cr3t-token" not in repr(fresh.kubeconfig) and "s3cr3t-token" not in str(fresh.kubeconfig)
        assert fresh.kubeconfig.reveal() == secret_text

    def test_given_a_broken_kubeconfig_when_stored_then_it_is_rejected_without_echoing_it(self):
        kyma, _ = apply_kyma()
        with pytest.raises(ValidationFailed) as failure:
            kymas.kyma_set_kubeconfig(
                kyma=kyma, kubeconfig="clusters: []\nusers: [{name: u, user: {token: leak}}]\n"
            )
        assert "leak" not in str(failure.value.errors)
        assert any(field == "kubeconfig.clusters" for field, _ in failure.value.errors)

    def test_given_kyma_without_finalizers_when_deleted_then_it_is_gone_at_once(self):
        kyma, _ = apply_kyma()
        assert kymas.kyma_delete(kyma=kyma) is True
        assert not Kyma.objects.exists()

    def test_given_kyma_with_finalizer_when_deleted_then_it_stays_deleting_and_refuses_changes(self):
        kyma, _ = apply_kyma()
        Kyma.objects.filter(pk=kyma.pk).update(finalizers=["operator.kyma-project.io/Kyma"])
        kyma.refresh_from_db()
        assert kymas.kyma_delete(kyma=kyma) is False
        kyma.refresh_from_db()
        assert kyma.state == "Deleting" and kyma.deletion_timestamp is not None
        with pytest.raises(Conflict):
            apply_kyma(channel="fast")


class TestModuleCatalogRules:
    def test_given_channels_with_bad_names_when_saved_then_rejected(self):
        module = ModuleFactory.build(channels={"Fast": "1.0"})
        with pytest.raises(ValidationFailed) as failure:
            modules.module_save(module=module)
        assert "channels" in error_fields(failure.value)

    def test_given_no_channels_when_saved_then_rejected(self):
        with pytest.raises(ValidationFailed) as failure:
            modules.module_save(module=ModuleFactory.build(channels={}))
        assert "channels" in error_fields(failure.value)

    def test_given_lower_case_kind_when_saved_then_rejected(self):
        with pytest.raises(ValidationFailed) as failure:
            modules.module_save(module=ModuleFactory.build(cr_kind="keda"))
        assert "upper-case" in error_fields(failure.value)["cr_kind"]

    def test_given_default_cr_with_unknown_top_level_field_when_saved_then_rejected(self):
        with pytest.raises(ValidationFailed) as failure:
            modules.module_save(module=ModuleFactory.build(default_cr={"spec": {}, "extra": 1}))
        assert "defaultCR.extra: unknown field" in error_fields(failure.value)["default_cr"]


class TestModuleConfigRevisions:
    def test_given_unchanged_spec_when_upserted_then_revision_stays(self):
        kyma, module = KymaFactory(), ModuleFactory()
        first, changed = modules.moduleconfig_upsert(
            kyma=kyma, module=module, spec={"a": 1}, source_generation=1, source_resource_version="10"
        )
        assert changed and first.revision > 0
        again, changed = modules.moduleconfig_upsert(
            kyma=kyma, module=module, spec={"a": 1}, source_generation=1, source_resource_version="10"
        )
        assert not changed and again.revision == first.revision

    def test_given_changes_across_configs_when_upserted_then_revisions_increase_globally(self):
        kyma, other, module = KymaFactory(), KymaFactory(), ModuleFactory()
        revisions = []
        for target, spec in ((kyma, {"a": 1}), (other, {"a": 1}), (kyma, {"a": 2})):
            config, _ = modules.moduleconfig_upsert(
                kyma=target, module=module, spec=spec, source_generation=1, source_resource_version="1"
            )
            revisions.append(config.revision)
        assert revisions == sorted(revisions) and len(set(revisions)) == 3
        assert ModuleConfig.objects.get(kyma=kyma).generation == 2

    def test_given_status_from_manager_when_unchanged_then_no_new_revision(self):
        config, _ = modules.moduleconfig_upsert(
            kyma=KymaFactory(),
            module=ModuleFactory(),
            spec={},
            source_generation=1,
            source_resource_version="1",
        )
        assert modules.moduleconfig_set_status(config=config, status={"state": "Ready"}) is True
        assert modules.moduleconfig_set_status(config=config, status={"state": "Ready"}) is False
        with pytest.raises(ValidationFailed):
            modules.moduleconfig_set_status(config=config, status={"state": "Fine"})


class TestSyncResourceRules:
    @pytest.mark.parametrize(
        ("manifests", "needle"),
        [
            ("kind: ConfigMap\nmetadata: {name: a}\n", "manifest 1: apiVersion is missing"),
            ("apiVersion: v1\nmetadata: {name: a}\n", "manifest 1: kind is missing"),
            ("apiVersion: v1\nkind: ConfigMap\nmetadata: {}\n", "manifest 1: metadata.name is missing"),
            ("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\n- 1\n", "document 2 is a list"),
            (
                (
                    "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\n"
                    "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n"
                ),
                "manifest 2: ConfigMap 'a' repeats manifest 1",
            ),
            ("a: [1, 2\n", "invalid YAML at line 2"),
        ],
    )
    def test_given_bad_manifests_when_saved_then_the_document_is_named(self, manifests, needle):
        resource = SyncResourceFactory.build(kyma=KymaFactory(), module=ModuleFactory(), manifests=manifests)
        with pytest.raises(ValidationFailed) as failure:
            modules.syncresource_save(resource)
        assert any(needle in reason for reason in [r for f, r in failure.value.errors if f == "manifests"]), (
            failure.value.errors
        )

    def test_given_unknown_strategy_when_saved_then_rejected(self):
        resource = SyncResourceFactory.build(
            kyma=KymaFactory(), module=ModuleFactory(), apply_strategy="Maybe"
        )
        with pytest.raises(ValidationFailed) as failure:
            modules.syncresource_save(resource)
        assert "apply_strategy" in error_fields(failure.value)

    def test_given_valid_manifests_when_saved_then_namespace_follows_the_kyma(self):
        kyma = KymaFactory(namespace="team-a")
        resource = SyncResourceFactory.build(kyma=kyma, module=ModuleFactory(), namespace="elsewhere")
        modules.syncresource_save(resource)
        assert SyncResource.objects.get().namespace == "team-a"
