"""Module managers' credentials over HTTP: own module vs another (read, report, write), revoked
and expired keys, every other endpoint refused with a reason, and staff managing them."""

from __future__ import annotations

import datetime as dt
import hashlib
import io

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone
from rest_framework.test import APIClient

from fleet.models import ModuleConfig, ModuleCredential, SyncResource
from fleet.services import modules
from fleet.services.credentials import module_credential_create, module_credential_revoke
from tests.factories import SAMPLE_MANIFESTS, KymaFactory, ModuleFactory, SyncResourceFactory

pytestmark = pytest.mark.django_db

CONFIGS = "/api/v1/moduleconfigs/"
SYNCS = "/api/v1/syncresources/"


def client_with(key: str, keyword: str = "Token") -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"{keyword} {key}")
    return client


def config_of(kyma, module) -> ModuleConfig:
    config, _ = modules.moduleconfig_upsert(
        kyma=kyma, module=module, spec={"replicas": 1}, source_generation=1, source_resource_version="1"
    )
    return config


def sync_doc(kyma, module: str, name: str = "manifests", manifests: str = SAMPLE_MANIFESTS) -> dict:
    return {
        "apiVersion": "controlplane.kyma-project.io/v1alpha1",
        "kind": "SyncResource",
        "metadata": {"name": name, "namespace": kyma.namespace},
        "spec": {"kyma": kyma.name, "module": module, "manifests": manifests},
    }


@pytest.fixture
def fleet():
    """Kyma k1 uses keda and serverless; k2 uses only serverless; serverless has a SyncResource."""
    keda, serverless = ModuleFactory(name="keda"), ModuleFactory(name="serverless")
    k1, k2 = KymaFactory(name="k1"), KymaFactory(name="k2")
    configs = {
        "keda": config_of(k1, keda),
        "serverless": config_of(k1, serverless),
        "serverless-k2": config_of(k2, serverless),
    }
    theirs = SyncResourceFactory(kyma=k1, module=serverless, name="serverless-manifests")
    _, key = module_credential_create(module=keda, name="keda-manager")
    return {"keda": keda, "k1": k1, "k2": k2, "configs": configs, "theirs": theirs, "key": key}


class TestOwnModule:
    def test_given_keda_credential_when_listing_configs_then_only_keda_configs(self, fleet):
        response = client_with(fleet["key"]).get(CONFIGS)
        assert response.status_code == 200, response.json()
        assert [c["spec"]["module"] for c in response.json()["results"]] == ["keda"]

    def test_given_keda_credential_when_reading_its_config_by_uid_and_name_then_200(self, fleet):
        config = fleet["configs"]["keda"]
        client = client_with(fleet["key"], "Bearer")
        assert client.get(f"{CONFIGS}{config.uid}/").status_code == 200
        assert client.get(f"{CONFIGS}kcp-system/{config.name}/").status_code == 200

    def test_given_keda_credential_when_reporting_its_status_then_200(self, fleet):
        config = fleet["configs"]["keda"]
        response = client_with(fleet["key"]).put(
            f"{CONFIGS}{config.uid}/status/", {"state": "Ready"}, format="json"
        )
        assert response.status_code == 200, response.json()
        assert ModuleConfig.objects.get(pk=config.pk).status == {"state": "Ready"}

    def test_given_keda_credential_when_writing_its_sync_resource_then_created_changed_deleted(self, fleet):
        client = client_with(fleet["key"])
        created = client.post(SYNCS, sync_doc(fleet["k1"], "keda"), format="json")
        assert created.status_code == 201, created.json()
        uid = created.json()["metadata"]["uid"]
        changed = sync_doc(fleet["k1"], "keda", manifests=SAMPLE_MANIFESTS.replace("info", "debug"))
        assert client.put(f"{SYNCS}{uid}/", changed, format="json").status_code == 200
        listed = client.get(SYNCS).json()["results"]
        assert [r["metadata"]["uid"] for r in listed] == [uid]  # serverless's is not listed
        assert client.delete(f"{SYNCS}{uid}/").status_code == 204
        assert not SyncResource.objects.filter(uid=uid).exists()


class TestOtherModule:
    def test_given_keda_credential_when_watching_serverless_then_403_before_any_stream(self, fleet):
        response = client_with(fleet["key"]).get(CONFIGS, {"module": "serverless", "watch": "true"})
        assert response.status_code == 403
        assert response.json()["detail"] == (
            "this credential belongs to module keda; ?module=serverless is module serverless"
        )

    def test_given_keda_credential_when_reading_a_serverless_config_then_403_naming_both(self, fleet):
        config = fleet["configs"]["serverless"]
        response = client_with(fleet["key"]).get(f"{CONFIGS}{config.uid}/")
        assert response.status_code == 403
        assert response.json()["detail"] == (
            "this credential belongs to module keda; "
            "ModuleConfig kcp-system/k1-serverless is module serverless"
        )

    def test_given_keda_credential_when_listing_serverless_configs_then_403(self, fleet):
        response = client_with(fleet["key"]).get(CONFIGS, {"module": "serverless"})
        assert response.status_code == 403
        assert "belongs to module keda" in response.json()["detail"]

    def test_given_keda_credential_when_reporting_a_serverless_status_then_403_and_nothing_changes(
        self, fleet
    ):
        config = fleet["configs"]["serverless"]
        response = client_with(fleet["key"]).put(
            f"{CONFIGS}{config.uid}/status/", {"state": "Error"}, format="json"
        )
        assert response.status_code == 403
        assert ModuleConfig.objects.get(pk=config.pk).status == {}

    def test_given_keda_credential_when_posting_a_serverless_sync_resource_then_403(self, fleet):
        response = client_with(fleet["key"]).post(SYNCS, sync_doc(fleet["k1"], "serverless"), format="json")
        assert response.status_code == 403
        assert response.json()["detail"] == (
            "this credential belongs to module keda; SyncResource kcp-system/manifests is module serverless"
        )
        assert not SyncResource.objects.filter(name="manifests").exists()

    def test_given_keda_credential_when_changing_or_deleting_serverless_sync_resource_then_403(self, fleet):
        theirs = fleet["theirs"]
        client = client_with(fleet["key"])
        doc = sync_doc(fleet["k1"], "keda", name=theirs.name)
        assert client.put(f"{SYNCS}{theirs.uid}/", doc, format="json").status_code == 403
        response = client.delete(f"{SYNCS}{theirs.uid}/")
        assert response.status_code == 403 and "is module serverless" in response.json()["detail"]
        assert SyncResource.objects.filter(pk=theirs.pk, deletion_timestamp=None).exists()

    def test_given_keda_credential_when_writing_for_a_kyma_without_keda_then_403(self, fleet):
        response = client_with(fleet["key"]).post(SYNCS, sync_doc(fleet["k2"], "keda"), format="json")
        assert response.status_code == 403
        assert "Kyma kcp-system/k2 does not use module keda" in response.json()["detail"]

    @pytest.mark.parametrize(
        ("method", "path"),
        [
            ("get", "/api/v1/kymas/"),
            ("get", "/api/v1/modules/"),
            ("get", "/api/v1/watchers/"),
            ("get", "/api/v1/events/"),
            ("get", "/api/v1/certificates/"),
            ("post", "/api/v1/apply/"),
            ("get", "/api/v1/modules/keda/credentials/"),
            ("post", "/api/v1/modules/keda/credentials/"),
        ],
    )
    def test_given_keda_credential_when_using_any_other_endpoint_then_403_with_the_reason(
        self, fleet, method, path
    ):
        response = getattr(client_with(fleet["key"]), method)(path, {}, format="json")
        assert response.status_code == 403, response.content
        assert response.json()["detail"].startswith(
            "this credential belongs to module keda: it may only read keda's ModuleConfigs"
        )


class TestKeyLifecycle:
    def test_given_revoked_credential_when_used_then_401_saying_when(self, fleet):
        credential = ModuleCredential.objects.get(name="keda-manager")
        module_credential_revoke(credential=credential)
        response = client_with(fleet["key"]).get(CONFIGS)
        assert response.status_code == 401
        assert response.json()["detail"].startswith("token revoked on ")

    def test_given_expired_credential_when_used_then_401_saying_when(self, fleet):
        expired = timezone.now().replace(microsecond=0) - dt.timedelta(minutes=1)
        _, key = module_credential_create(module=fleet["keda"], name="old", expires_at=expired)
        response = client_with(key).get(CONFIGS)
        assert response.status_code == 401
        assert response.json()["detail"] == f"token expired on {expired.strftime('%Y-%m-%dT%H:%M:%SZ')}"

    def test_given_credential_when_used_then_last_use_recorded_and_only_digest_stored(self, fleet):
        assert client_with(fleet["key"]).get(CONFIGS).status_code == 200
        stored = ModuleCredential.objects.values().get(name="keda-manager")
        assert stored["last_used_at"] is not None
        assert stored["digest"] == hashlib.sha256(fleet["key"].encode()).hexdigest()
        assert fleet["key"].startswith(stored["prefix"]) and fleet["key"] not in str(stored)

    def test_given_unknown_module_key_when_used_then_401(self, fleet):
        assert client_with(fleet["key"][:-3] + "zzz").get(CONFIGS).status_code == 401


class TestStaffManagesCredentials:
    def test_given_staff_when_creating_then_key_shown_once_and_it_works(self, api, fleet):
        created = api.post("/api/v1/modules/keda/credentials/", {"name": "ci"}, format="json")
        assert created.status_code == 201, created.json()
        body = created.json()
        assert body["token"].startswith("kcpm_") and body["state"] == "Active" and body["createdBy"] == "root"
        assert client_with(body["token"]).get(CONFIGS).status_code == 200
        listed = api.get("/api/v1/modules/keda/credentials/").json()["results"]
        assert [c["name"] for c in listed] == ["ci", "keda-manager"]
        assert all("token" not in c for c in listed) and listed[0]["lastUsedAt"] is not None

    def test_given_staff_when_revoking_then_the_key_answers_401(self, api, fleet):
        response = api.post("/api/v1/modules/keda/credentials/keda-manager/revoke/")
        assert response.status_code == 200 and response.json()["state"] == "Revoked"
        assert client_with(fleet["key"]).get(CONFIGS).status_code == 401
        assert api.post("/api/v1/modules/keda/credentials/nope/revoke/").status_code == 404

    @pytest.mark.parametrize(
        ("body", "field"),
        [
            ({"name": "keda-manager"}, "name"),
            ({"name": "x", "expiresAt": "tomorrow"}, "expiresAt"),
            ({"name": "x", "expiresAt": "2001-01-01T00:00:00Z"}, "expiresAt"),
            ({"name": "x", "scope": "all"}, "name"),
        ],
    )
    def test_given_bad_body_when_creating_then_400_naming_the_field(self, api, fleet, body, field):
        response = api.post("/api/v1/modules/keda/credentials/", body, format="json")
        assert response.status_code == 400, response.json()
        assert response.json()["errors"][0]["field"] == field

    def test_given_expiry_when_creating_then_it_is_kept(self, api, fleet):
        response = api.post(
            "/api/v1/modules/keda/credentials/",
            {"name": "x", "expiresAt": "2999-01-01T00:00:00Z"},
            format="json",
        )
        assert response.status_code == 201 and response.json()["expiresAt"] == "2999-01-01T00:00:00Z"

    def test_given_user_without_permission_when_creating_then_403(self, user_with, fleet):
        client = user_with("controlplane.view_module")
        response = client.post("/api/v1/modules/keda/credentials/", {"name": "x"}, format="json")
        assert response.status_code == 403
        assert response.json()["detail"] == "you may not add module credentials"
        viewer = user_with("controlplane.view_module", "controlplane.view_modulecredential")
        assert viewer.get("/api/v1/modules/keda/credentials/").status_code == 200


class TestCommand:
    def test_given_a_module_when_creating_listing_revoking_from_the_terminal_then_the_key_works_until_revoked(
        self, fleet
    ):
        out = io.StringIO()
        call_command(
            "credential", "create", "keda", "cli", "--expires-in-days", "3", stdout=out, stderr=io.StringIO()
        )
        key = out.getvalue().strip()
        assert key.startswith("kcpm_") and client_with(key).get(CONFIGS).status_code == 200
        listing = io.StringIO()
        call_command("credential", "list", "keda", stdout=listing)
        assert "cli" in listing.getvalue() and key not in listing.getvalue()
        call_command("credential", "revoke", "keda", "cli", stdout=io.StringIO())
        assert client_with(key).get(CONFIGS).status_code == 401

    def test_given_unknown_module_or_duplicate_name_then_clear_errors(self, fleet):
        with pytest.raises(CommandError, match="no module 'nope'"):
            call_command("credential", "create", "nope", "x", stdout=io.StringIO(), stderr=io.StringIO())
        with pytest.raises(CommandError, match="already has a credential with this name"):
            call_command(
                "credential", "create", "keda", "keda-manager", stdout=io.StringIO(), stderr=io.StringIO()
            )

    @pytest.mark.parametrize("days", ["0", "36501", "99999999999", "9" * 5000, "soon"])
    def test_given_days_out_of_range_when_creating_then_one_line_error_naming_the_range(self, fleet, days):
        before = ModuleCredential.objects.count()

        with pytest.raises(CommandError) as refused:
            call_command(
                "credential", "create", "keda", "cli", "--expires-in-days", days, stdout=io.StringIO()
            )

        message = str(refused.value)
        assert "\n" not in message and len(message) < 250
        assert "is not a whole number of days at least 1 and at most 36,500 (100 years)" in message
        assert ModuleCredential.objects.count() == before
