"""The API's manners: the browsable API renders, unknown URLs answer JSON 404, objects are
reachable by namespace/name, ``Bearer`` tokens work."""

from __future__ import annotations

import pytest
from rest_framework.authtoken.models import Token

from fleet.services import modules
from tests.factories import KymaFactory, ModuleFactory, SyncResourceFactory, WatcherFactory

pytestmark = pytest.mark.django_db

HTML = "text/html"


@pytest.fixture
def browser(client, admin_user):
    """A Django test client logged in as the administrator (a session, like a browser)."""
    client.force_login(admin_user)
    return client


@pytest.fixture
def objects() -> dict[str, object]:
    kyma = KymaFactory(name="demo-1", namespace="kcp-system")
    module = ModuleFactory(name="serverless")
    config, _ = modules.moduleconfig_upsert(
        kyma=kyma, module=module, spec={}, source_generation=1, source_resource_version="1"
    )
    return {
        "kymas": kyma,
        "watchers": WatcherFactory(name="kyma-watcher", namespace="kcp-system"),
        "modules": module,
        "moduleconfigs": config,
        "syncresources": SyncResourceFactory(kyma=kyma, module=module, name="settings"),
    }


class TestBrowsableApi:
    @pytest.mark.parametrize(
        "plural",
        [
            "kymas",
            "watchers",
            "modules",
            "moduleconfigs",
            "syncresources",
            "certificates",
            "certificateauthorities",
            "events",
        ],
    )
    def test_given_admin_session_when_browsing_a_list_then_html_page(self, browser, objects, plural):
        response = browser.get(f"/api/v1/{plural}/", HTTP_ACCEPT=HTML)
        assert response.status_code == 200, response.content[:2000]
        assert response["Content-Type"].startswith(HTML)

    @pytest.mark.parametrize("plural", ["kymas", "watchers", "modules", "moduleconfigs", "syncresources"])
    def test_given_admin_session_when_browsing_a_detail_then_html_page_with_the_document(
        self, browser, objects, plural
    ):
        obj = objects[plural]
        response = browser.get(f"/api/v1/{plural}/{obj.uid}/", HTTP_ACCEPT=HTML)
        assert response.status_code == 200, response.content[:2000]
        assert response["Content-Type"].startswith(HTML)
        assert obj.name in response.content.decode()

    def test_given_admin_session_when_browsing_the_root_and_apply_then_html_pages(self, browser):
        assert browser.get("/api/v1/", HTTP_ACCEPT=HTML).status_code == 200
        assert browser.get("/api/v1/apply/", HTTP_ACCEPT=HTML).status_code == 405

    def test_given_admin_session_when_browsing_an_action_then_html_page_without_the_document(
        self, browser, objects
    ):
        kyma, config = objects["kymas"], objects["moduleconfigs"]
        page = browser.get(f"/api/v1/kymas/{kyma.uid}/kubeconfig/", HTTP_ACCEPT=HTML)
        assert page.status_code == 200 and '"set": false' in page.content.decode().replace("&quot;", '"')
        assert kyma.runtime_id not in page.content.decode()
        assert browser.get(f"/api/v1/moduleconfigs/{config.uid}/status/", HTTP_ACCEPT=HTML).status_code == 405

    def test_given_admin_session_when_browsing_a_list_then_the_form_offers_a_document_skeleton(
        self, browser, objects
    ):
        page = browser.get("/api/v1/kymas/", HTTP_ACCEPT=HTML).content.decode().replace("&quot;", '"')
        assert '"apiVersion": "operator.kyma-project.io/v1beta2"' in page and '"kind": "Kyma"' in page


class TestUnknownUrls:
    @pytest.mark.parametrize(
        "url",
        [
            "/api/v1/nothing/",
            "/api/v1/kymas/demo-1/extra/more/",
            "/api/v1/kymas/00000000-0000-0000-0000-000000000000/",
            "/api/v2/kymas/",
            "/api/",
        ],
    )
    def test_given_unknown_api_url_when_requested_then_json_404(self, api, url):
        response = api.get(url)
        assert response.status_code == 404
        assert response["Content-Type"].startswith("application/json")
        body = response.json()
        assert set(body) == {"detail", "errors"} and body["detail"] and body["errors"] == []

    def test_given_unknown_api_url_when_posted_without_credentials_then_json_404(self, client):
        response = client.post("/api/v1/nothing/", data=b"{}", content_type="application/json")
        assert response.status_code == 404 and response.json()["errors"] == []
        assert "/api/v1/nothing/" in response.json()["detail"]

    def test_given_missing_trailing_slash_when_posted_then_404_names_the_right_url(self, api):
        response = api.post("/api/v1/kymas", data=b"{}", content_type="application/json")
        assert response.status_code == 404
        assert "/api/v1/kymas/" in response.json()["detail"]

    def test_given_missing_trailing_slash_when_read_then_redirected_as_before(self, api):
        response = api.get("/api/v1/kymas?channel=fast")
        assert response.status_code == 301 and response["Location"] == "/api/v1/kymas/?channel=fast"


class TestNamespaceNameLookup:
    @pytest.mark.parametrize("plural", ["kymas", "watchers", "moduleconfigs", "syncresources"])
    def test_given_namespaced_object_when_read_by_namespace_and_name_then_same_document_as_by_uid(
        self, api, objects, plural
    ):
        obj = objects[plural]
        by_name = api.get(f"/api/v1/{plural}/{obj.namespace}/{obj.name}/")
        assert by_name.status_code == 200, by_name.json()
        assert by_name.json() == api.get(f"/api/v1/{plural}/{obj.uid}/").json()

    def test_given_module_when_read_by_name_then_found(self, api, objects):
        response = api.get("/api/v1/modules/serverless/")
        assert response.status_code == 200 and response.json()["metadata"]["uid"] == str(
            objects["modules"].uid
        )

    @pytest.mark.parametrize(
        "url",
        [
            "/api/v1/kymas/kcp-system/demo-2/",
            "/api/v1/kymas/other/demo-1/",
            "/api/v1/kymas/demo-1/",
            "/api/v1/modules/nothing/",
            "/api/v1/modules/kcp-system/serverless/",
            "/api/v1/kymas/------------------------------------/",
            "/api/v1/modules/------------------------------------/",
        ],
    )
    def test_given_unknown_namespace_or_name_when_read_then_json_404(self, api, objects, url):
        response = api.get(url)
        assert response.status_code == 404 and response.json()["errors"] == []

    def test_given_kyma_when_put_by_namespace_and_name_then_updated(self, api, objects):
        doc = api.get("/api/v1/kymas/kcp-system/demo-1/").json()
        doc["spec"]["channel"] = "fast"
        response = api.put("/api/v1/kymas/kcp-system/demo-1/", doc, format="json")
        assert response.status_code == 200, response.json()
        assert response.json()["spec"]["channel"] == "fast"

    def test_given_kyma_when_put_by_namespace_and_name_with_another_name_then_400(self, api, objects):
        doc = api.get("/api/v1/kymas/kcp-system/demo-1/").json()
        doc["metadata"]["name"] = "demo-2"
        response = api.put("/api/v1/kymas/kcp-system/demo-1/", doc, format="json")
        assert response.status_code == 400 and response.json()["errors"][0]["field"] == "metadata.name"

    def test_given_watcher_when_deleted_by_namespace_and_name_then_gone_or_deleting(self, api, objects):
        response = api.delete("/api/v1/watchers/kcp-system/kyma-watcher/")
        assert response.status_code in (202, 204)

    def test_given_module_when_deleted_by_name_then_gone(self, api):
        ModuleFactory(name="keda")
        assert api.delete("/api/v1/modules/keda/").status_code == 204
        assert api.get("/api/v1/modules/keda/").status_code == 404

    def test_given_kyma_when_its_actions_are_called_by_namespace_and_name_then_they_work(self, api, objects):
        assert api.get("/api/v1/kymas/kcp-system/demo-1/kubeconfig/").json() == {"set": False}
        kyma = objects["kymas"]
        assert api.get(f"/api/v1/kymas/{kyma.uid}/kubeconfig/").json() == {"set": False}


class TestBearerTokens:
    def test_given_bearer_token_when_listing_then_200(self, client, admin_user):
        key = Token.objects.create(user=admin_user).key
        response = client.get("/api/v1/kymas/", HTTP_AUTHORIZATION=f"Bearer {key}")
        assert response.status_code == 200, response.json()

    def test_given_bad_bearer_token_when_listing_then_401_invalid_token(self, client):
        response = client.get("/api/v1/kymas/", HTTP_AUTHORIZATION="Bearer nope")
        assert response.status_code == 401 and response.json()["detail"] == "Invalid token."
        assert response["WWW-Authenticate"] == "Token"

    def test_given_token_keyword_when_listing_then_still_200(self, api):
        assert api.get("/api/v1/kymas/").status_code == 200
