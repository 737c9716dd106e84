"""The REST API: CRUD in the CR shapes, auth, permissions, validation errors, actions."""

from __future__ import annotations

import pytest
import yaml

from fleet.models import Kyma
from fleet.services import modules
from tests.factories import KymaFactory, ModuleFactory, SyncResourceFactory
from tests.fleet.test_documents import UPSTREAM_KYMA, UPSTREAM_WATCHER

pytestmark = pytest.mark.django_db

KUBECONFIG = (
    "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:6443'}}]\n"
    "contexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n"
    "users: [{name: u, user: {token: very-secret-token}}]\n"
)


def post_yaml(client, url: str, text: str):
    return client.post(url, data=text.encode(), content_type="application/yaml")


class TestAuth:
    def test_given_no_credentials_when_listing_then_401_with_json_error(self, client):
        response = client.get("/api/v1/kymas/")
        assert response.status_code == 401
        assert response.json()["detail"] and response.json()["errors"] == []

    def test_given_bad_token_when_listing_then_401(self, client):
        response = client.get("/api/v1/kymas/", HTTP_AUTHORIZATION="Token nope")
        assert response.status_code == 401

    def test_given_user_without_permission_when_listing_then_403(self, user_with):
        assert user_with().get("/api/v1/kymas/").status_code == 403

    def test_given_read_only_user_when_creating_then_403_but_reading_works(self, user_with):
        client = user_with("controlplane.view_kyma")
        assert client.get("/api/v1/kymas/").status_code == 200
        assert post_yaml(client, "/api/v1/kymas/", UPSTREAM_KYMA).status_code == 403

    def test_given_user_who_may_only_add_when_reapplying_existing_then_403(self, user_with):
        KymaFactory(name="3d1f0b6c-runtime", runtime_id="3d1f0b6c-runtime")
        client = user_with("controlplane.view_kyma", "controlplane.add_kyma")
        assert post_yaml(client, "/api/v1/kymas/", UPSTREAM_KYMA).status_code == 403


class TestKymaCrud:
    def test_given_upstream_yaml_when_posted_then_created_then_configured(self, api):
        created = post_yaml(api, "/api/v1/kymas/", UPSTREAM_KYMA)
        assert created.status_code == 201, created.json()
        doc = created.json()
        assert (
            doc["kind"] == "Kyma"
            and doc["metadata"]["labels"]["kyma-project.io/runtime-id"] == "3d1f0b6c-runtime"
        )
        again = post_yaml(api, "/api/v1/kymas/", UPSTREAM_KYMA.replace("channel: regular", "channel: fast"))
        assert again.status_code == 200
        assert again.json()["metadata"]["generation"] == 2

    def test_given_json_document_when_posted_then_created(self, api):
        doc = yaml.safe_load(UPSTREAM_KYMA)
        assert api.post("/api/v1/kymas/", doc, format="json").status_code == 201

    def test_given_invalid_document_when_posted_then_400_names_every_field(self, api):
        text = UPSTREAM_KYMA.replace("  channel: regular", "  channel: none\n  colour: blue")
        response = post_yaml(api, "/api/v1/kymas/", text)
        assert response.status_code == 400
        fields = {e["field"]: e["reason"] for e in response.json()["errors"]}
        assert fields == {
            "spec.channel": "'none' is reserved and not allowed",
            "spec.colour": "unknown field",
        }
        assert not Kyma.objects.exists()

    def test_given_broken_yaml_when_posted_then_400_with_position(self, api):
        response = post_yaml(api, "/api/v1/kymas/", "metadata: [1, 2\n")
        assert response.status_code == 400
        assert "line 2" in response.json()["detail"]

    def test_given_a_list_when_posted_to_a_kind_then_400(self, api):
        response = post_yaml(api, "/api/v1/kymas/", UPSTREAM_KYMA + "---\n" + UPSTREAM_KYMA)
        assert response.status_code == 400

    def test_given_kymas_when_listing_then_paginated_and_filterable(self, api):
        KymaFactory.create_batch(3, channel="fast")
        KymaFactory(channel="regular", state="Ready")
        page = api.get("/api/v1/kymas/?limit=2").json()
        assert page["count"] == 4 and len(page["results"]) == 2 and page["next"]
        fast = api.get("/api/v1/kymas/?channel=fast").json()
        assert fast["count"] == 3
        ready = api.get("/api/v1/kymas/?state=Ready").json()
        assert [k["status"]["state"] for k in ready["results"]] == ["Ready"]

    def test_given_bad_filter_value_when_listing_then_400_not_500(self, api):
        response = api.get("/api/v1/kymas/?state=Sleepy")
        assert response.status_code == 400
        assert response.json()["errors"][0]["field"] == "state"

    def test_given_uid_when_reading_then_the_document_comes_back_in_yaml_too(self, api):
        kyma = KymaFactory()
        response = api.get(f"/api/v1/kymas/{kyma.uid}/", HTTP_ACCEPT="application/yaml")
        assert response.status_code == 200
        assert yaml.safe_load(response.content)["metadata"]["name"] == kyma.name

    def test_given_unknown_uid_when_reading_then_404_json(self, api):
        response = api.get("/api/v1/kymas/00000000-0000-0000-0000-000000000000/")
        assert response.status_code == 404 and response.json()["detail"]

    def test_given_put_naming_another_object_when_updating_then_400(self, api):
        kyma = KymaFactory()
        response = api.put(
            f"/api/v1/kymas/{kyma.uid}/", data=UPSTREAM_KYMA.encode(), content_type="application/yaml"
        )
        assert response.status_code == 400
        assert response.json()["errors"][0]["field"] == "metadata.name"

    def test_given_kyma_without_finalizers_when_deleted_then_204(self, api):
        kyma = KymaFactory()
        assert api.delete(f"/api/v1/kymas/{kyma.uid}/").status_code == 204
        assert not Kyma.objects.exists()

    def test_given_kyma_with_finalizer_when_deleted_then_202_and_deleting(self, api):
        kyma = KymaFactory(finalizers=["operator.kyma-project.io/Kyma"])
        response = api.delete(f"/api/v1/kymas/{kyma.uid}/")
        assert response.status_code == 202
        assert response.json()["status"]["state"] == "Deleting"
        assert response.json()["metadata"]["deletionTimestamp"]

    def test_given_patch_when_sent_then_405(self, api):
        kyma = KymaFactory()
        response = api.patch(f"/api/v1/kymas/{kyma.uid}/", {}, format="json")
        assert response.status_code == 405


class TestKymaActions:
    @pytest.mark.django_db(transaction=True)
    def test_given_kyma_when_reconcile_requested_then_one_task_is_queued_and_coalesced(self, api, task_queue):
        kyma = KymaFactory()
        task_queue()
        first = api.post(f"/api/v1/kymas/{kyma.uid}/reconcile/")
        second = api.post(f"/api/v1/kymas/{kyma.uid}/reconcile/")
        assert first.status_code == second.status_code == 202
        assert first.json()["queued"] is True and second.json()["queued"] is False
        tasks = task_queue()
        assert [(t.name, t.args) for t in tasks] == [("controlplane.kyma_reconcile", [kyma.pk])]

    def test_given_kubeconfig_when_put_then_it_is_stored_and_never_returned(self, api):
        kyma = KymaFactory()
        url = f"/api/v1/kymas/{kyma.uid}/kubeconfig/"
        response = api.put(url, data=KUBECONFIG.encode(), content_type="application/yaml")
        assert response.status_code == 204
        assert api.get(url).json() == {"set": True}
        for path in (f"/api/v1/kymas/{kyma.uid}/", "/api/v1/kymas/"):
            assert b"very-secret-token" not in api.get(path).content
        assert api.delete(url).status_code == 204
        assert api.get(url).json() == {"set": False}

    def test_given_broken_kubeconfig_when_put_then_400_without_echo(self, api):
        kyma = KymaFactory()
        body = {"kubeconfig": "clusters: []\nusers: [{name: u, user: {token: leaked-token}}]\n"}
        response = api.put(f"/api/v1/kymas/{kyma.uid}/kubeconfig/", body, format="json")
        assert response.status_code == 400
        assert b"leaked-token" not in response.content


class TestOtherKinds:
    def test_given_watcher_yaml_when_posted_then_created_and_listed(self, api):
        assert post_yaml(api, "/api/v1/watchers/", UPSTREAM_WATCHER).status_code == 201
        listed = api.get("/api/v1/watchers/").json()
        assert listed["results"][0]["spec"]["serviceInfo"]["port"] == 8082

    def test_given_duplicate_component_when_posted_then_400_names_manager(self, api):
        post_yaml(api, "/api/v1/watchers/", UPSTREAM_WATCHER)
        response = post_yaml(
            api, "/api/v1/watchers/", UPSTREAM_WATCHER.replace("name: klm-watcher", "name: other")
        )
        assert response.status_code == 400
        assert response.json()["errors"][0]["field"] == "spec.manager"

    def test_given_moduleconfigs_when_reading_since_revision_then_only_newer_in_order(self, api):
        kyma, module = KymaFactory(), ModuleFactory()
        revisions = []
        for spec in ({"a": 1}, {"a": 2}, {"a": 3}):
            config, _ = modules.moduleconfig_upsert(
                kyma=kyma, module=module, spec=spec, source_generation=1, source_resource_version="1"
            )
            revisions.append(config.revision)
        other, _ = modules.moduleconfig_upsert(
            kyma=KymaFactory(), module=module, spec={}, source_generation=1, source_resource_version="1"
        )
        page = api.get(f"/api/v1/moduleconfigs/?since_revision={revisions[0]}").json()
        assert [int(d["metadata"]["resourceVersion"]) for d in page["results"]] == [
            revisions[2],
            other.revision,
        ]

    def test_given_module_manager_when_reporting_status_then_revision_moves_and_bad_status_is_400(self, api):
        config, _ = modules.moduleconfig_upsert(
            kyma=KymaFactory(),
            module=ModuleFactory(),
            spec={},
            source_generation=1,
            source_resource_version="1",
        )
        url = f"/api/v1/moduleconfigs/{config.uid}/status/"
        ok = api.put(url, {"state": "Ready", "message": "all good"}, format="json")
        assert ok.status_code == 200 and ok.json()["status"]["state"] == "Ready"
        assert int(ok.json()["metadata"]["resourceVersion"]) > config.revision
        bad = api.put(url, {"state": "Fine"}, format="json")
        assert bad.status_code == 400 and bad.json()["errors"][0]["field"] == "status.state"
        assert api.put(f"/api/v1/moduleconfigs/{config.uid}/", {}, format="json").status_code == 405
        assert api.post("/api/v1/moduleconfigs/", {}, format="json").status_code == 405

    def test_given_syncresource_for_unknown_kyma_when_posted_then_400_names_spec_kyma(self, api):
        module = ModuleFactory()
        doc = {
            "apiVersion": "controlplane.kyma-project.io/v1alpha1",
            "kind": "SyncResource",
            "metadata": {"name": "s1", "namespace": "kcp-system"},
            "spec": {
                "kyma": "nope",
                "module": module.name,
                "manifests": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n",
            },
        }
        response = api.post("/api/v1/syncresources/", doc, format="json")
        assert response.status_code == 400 and response.json()["errors"][0]["field"] == "spec.kyma"

    def test_given_syncresource_when_posted_then_created_with_pending_status(self, api):
        resource = SyncResourceFactory.build(kyma=KymaFactory(), module=ModuleFactory())
        doc = {
            "apiVersion": "controlplane.kyma-project.io/v1alpha1",
            "kind": "SyncResource",
            "metadata": {"name": "s1", "namespace": resource.kyma.namespace},
            "spec": {
                "kyma": resource.kyma.name,
                "module": resource.module.name,
                "manifests": resource.manifests,
            },
        }
        response = api.post("/api/v1/syncresources/", doc, format="json")
        assert response.status_code == 201, response.json()
        assert response.json()["status"]["state"] == "Pending"

    def test_given_mixed_documents_when_applied_then_all_or_nothing(self, api):
        good = post_yaml(api, "/api/v1/apply/", UPSTREAM_WATCHER + "---\n" + UPSTREAM_KYMA)
        assert good.status_code == 200
        assert [r["outcome"] for r in good.json()["results"]] == ["created", "created"]
        bad = post_yaml(api, "/api/v1/apply/", UPSTREAM_KYMA + "---\nkind: Nope\n")
        assert bad.status_code == 400
        assert bad.json()["errors"][0]["field"] == "documents[1].kind"


class TestOpenAPI:
    def test_given_schema_when_requested_then_it_documents_the_kinds(self, api):
        response = api.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
        assert response.status_code == 200
        schema = response.json()
        assert schema["openapi"].startswith("3.1")
        assert "/api/v1/kymas/{id}/reconcile/" in schema["paths"]

    def test_given_docs_page_when_requested_then_it_renders_from_local_assets(self, admin_client):
        response = admin_client.get("/api/docs/")
        assert response.status_code == 200
        assert b"swagger-ui" in response.content and b"cdn.jsdelivr" not in response.content
