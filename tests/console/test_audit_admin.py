"""Writes the fleet's admin makes without a form of ``ResourceAdmin`` are in the audit trail too:
a module credential's expiry edited or the credential deleted (and its History shows its trail),
a ModuleConfig deleted, the maintenance-window policy saved or deleted, a finished job deleted."""

from __future__ import annotations

import json

import pytest
from django.urls import reverse

from fleet.models import Job, JobStatus, MaintenancePolicy, ModuleConfig, ModuleCredential
from fleet.services.credentials import module_credential_create, module_credential_revoke
from kernel.models import AuditEntry
from tests.factories import KymaFactory, ModuleFactory

pytestmark = pytest.mark.django_db

POLICY = {"default": {"days": ["Sun"], "begin": "14:00:00+00:00", "end": "17:00:00+00:00"}}


def everything_recorded() -> str:
    return json.dumps(list(AuditEntry.objects.values()), default=str)


@pytest.fixture
def credential(admin_user):
    credential, key = module_credential_create(module=ModuleFactory(name="keda"), name="keda-manager")
    return credential, key


class TestModuleCredentials:
    def test_given_an_expiry_set_in_the_admin_then_recorded_under_the_module(self, admin_client, credential):
        credential, key = credential

        response = admin_client.post(
            reverse("admin:controlplane_modulecredential_change", args=[credential.pk]),
            {"name": "keda-manager", "expires_at_0": "2031-01-02", "expires_at_1": "03:04:05"},
        )

        assert response.status_code == 302
        entry = AuditEntry.objects.get(kind="ModuleCredential", action="update")
        assert (entry.actor, entry.via, entry.namespace, entry.name) == (
            "root",
            "admin",
            "keda",
            "keda-manager",
        )
        assert [c["field"] for c in entry.changes] == ["expires_at"]
        assert key not in everything_recorded()

    def test_given_a_credential_deleted_in_the_admin_then_recorded_without_its_key(
        self, admin_client, credential
    ):
        credential, key = credential

        response = admin_client.post(
            reverse("admin:controlplane_modulecredential_delete", args=[credential.pk]), {"post": "yes"}
        )

        assert response.status_code == 302 and not ModuleCredential.objects.exists()
        entry = AuditEntry.objects.get(kind="ModuleCredential", action="delete")
        assert (entry.actor, entry.via, entry.namespace, entry.name) == (
            "root",
            "admin",
            "keda",
            "keda-manager",
        )
        assert key not in everything_recorded() and credential.digest not in everything_recorded()

    def test_given_credentials_deleted_by_the_list_action_then_each_recorded(self, admin_client, credential):
        credential, _ = credential
        other, _ = module_credential_create(module=credential.module, name="ci")

        admin_client.post(
            reverse("admin:controlplane_modulecredential_changelist"),
            {"action": "delete_selected", "_selected_action": [credential.pk, other.pk], "post": "yes"},
        )

        deleted = AuditEntry.objects.filter(kind="ModuleCredential", action="delete")
        assert sorted(deleted.values_list("name", flat=True)) == ["ci", "keda-manager"]

    def test_given_a_credential_made_and_revoked_then_its_history_page_is_its_trail(
        self, admin_client, api, credential
    ):
        credential, _ = credential
        api.post("/api/v1/modules/keda/credentials/keda-manager/revoke/")

        history = admin_client.get(
            reverse("admin:controlplane_modulecredential_history", args=[credential.pk])
        ).content.decode()

        assert history.count("cp-audit-done") == 1  # the revoke, through the API (made by a service call)
        assert "revoked_at" in history

    def test_given_a_revoked_credential_when_revoking_again_then_nothing_more_is_recorded(self, credential):
        credential, _ = credential
        module_credential_revoke(credential=credential)

        assert not module_credential_revoke(credential=credential)
        assert not AuditEntry.objects.exists()  # no door acting: a service call alone records nothing


class TestOtherAdminWrites:
    def test_given_a_moduleconfig_deleted_in_the_admin_then_recorded_on_its_kymas_timeline(
        self, admin_client
    ):
        kyma = KymaFactory(name="c-1")
        config = ModuleConfig.objects.create(
            kyma=kyma, module=ModuleFactory(name="keda"), namespace=kyma.namespace, name="c-1-keda"
        )

        response = admin_client.post(
            reverse("admin:controlplane_moduleconfig_delete", args=[config.pk]), {"post": "yes"}
        )

        assert response.status_code == 302 and not ModuleConfig.objects.exists()
        entry = AuditEntry.objects.get(kind="ModuleConfig")
        assert (entry.action, entry.actor, entry.name, entry.kyma_id) == (
            "delete",
            "root",
            "c-1-keda",
            kyma.pk,
        )

    def test_given_the_maintenance_policy_added_changed_and_deleted_then_each_recorded(self, admin_client):
        changed = {"default": {**POLICY["default"], "days": ["Sat"]}}

        admin_client.post(reverse("admin:controlplane_maintenancepolicy_add"), {"policy": json.dumps(POLICY)})
        policy = MaintenancePolicy.objects.get()
        admin_client.post(
            reverse("admin:controlplane_maintenancepolicy_change", args=[policy.pk]),
            {"policy": json.dumps(changed)},
        )
        admin_client.post(
            reverse("admin:controlplane_maintenancepolicy_delete", args=[policy.pk]), {"post": "yes"}
        )

        entries = list(AuditEntry.objects.filter(kind="MaintenancePolicy").order_by("id"))
        assert [(e.action, e.name, e.actor, e.via) for e in entries] == [
            ("create", "default", "root", "admin"),
            ("update", "default", "root", "admin"),
            ("delete", "default", "root", "admin"),
        ]
        assert entries[1].changes == [{"field": "policy", "before": POLICY, "after": changed}]

    def test_given_a_finished_job_deleted_in_the_admin_then_recorded_by_its_id(self, admin_client):
        job = Job.objects.create(kind="reconcile", targets={}, total=0, status=JobStatus.COMPLETED)

        response = admin_client.post(reverse("admin:controlplane_job_delete", args=[job.pk]), {"post": "yes"})

        assert response.status_code == 302 and not Job.objects.exists()
        entry = AuditEntry.objects.get(kind="Job")
        assert (entry.action, entry.name, entry.actor) == ("delete", str(job.pk), "root")
