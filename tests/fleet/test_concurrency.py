"""Optimistic concurrency like Kubernetes: every document carries ``metadata.resourceVersion``;
a write that names a stale one is refused (409) in the API, ``apply`` and the admin form."""

from __future__ import annotations

import io

import pytest
import yaml
from django.core.management import CommandError, call_command

from fleet.models import Kyma
from fleet.services import kymas as kyma_services
from tests.factories import KymaFactory, ModuleFactory, SyncResourceFactory, WatcherFactory

pytestmark = pytest.mark.django_db

MODIFIED = "the object has been modified; please apply your changes to the latest version"


def someone_changes_channel(kyma: Kyma, channel: str = "fast") -> None:
    """Another writer (a user in the runtime, adopted by a reconcile) changes the spec."""
    fresh = Kyma.objects.get(pk=kyma.pk)
    fresh.channel = channel
    kyma_services.kyma_save(kyma=fresh, reconcile=False)


class TestResourceVersion:
    @pytest.mark.parametrize(
        ("plural", "factory"),
        [
            ("kymas", KymaFactory),
            ("watchers", WatcherFactory),
            ("modules", ModuleFactory),
            ("syncresources", SyncResourceFactory),
        ],
    )
    def test_given_any_document_when_read_then_it_carries_a_resource_version(self, api, plural, factory):
        obj = factory()
        assert api.get(f"/api/v1/{plural}/{obj.uid}/").json()["metadata"]["resourceVersion"]

    def test_given_kyma_when_spec_changes_then_resource_version_grows(self, api):
        kyma = KymaFactory()
        before = api.get(f"/api/v1/kymas/{kyma.uid}/").json()["metadata"]["resourceVersion"]
        someone_changes_channel(kyma)
        after = api.get(f"/api/v1/kymas/{kyma.uid}/").json()["metadata"]["resourceVersion"]
        assert int(after) > int(before)

    def test_given_kyma_when_labels_change_then_resource_version_grows_but_generation_not(self, api):
        kyma = KymaFactory()
        doc = api.get(f"/api/v1/kymas/{kyma.uid}/").json()
        doc["metadata"].setdefault("labels", {})["team"] = "blue"
        after = api.put(f"/api/v1/kymas/{kyma.uid}/", doc, format="json").json()["metadata"]
        assert int(after["resourceVersion"]) > int(doc["metadata"]["resourceVersion"])
        assert after["generation"] == doc["metadata"]["generation"]

    def test_given_kyma_when_applied_unchanged_then_resource_version_stays(self, api):
        kyma = KymaFactory()
        doc = api.get(f"/api/v1/kymas/{kyma.uid}/").json()
        again = api.put(f"/api/v1/kymas/{kyma.uid}/", doc, format="json").json()
        assert again["metadata"]["resourceVersion"] == doc["metadata"]["resourceVersion"]


class TestApiConflicts:
    def test_given_stale_resource_version_when_put_then_409_and_nothing_changes(self, api):
        kyma = KymaFactory(channel="regular")
        doc = api.get(f"/api/v1/kymas/{kyma.uid}/").json()
        someone_changes_channel(kyma, "fast")
        doc["spec"]["channel"] = "regular"
        doc["metadata"]["labels"] = {"mine": "yes"}
        response = api.put(f"/api/v1/kymas/{kyma.uid}/", doc, format="json")
        assert response.status_code == 409, response.json()
        assert MODIFIED in response.json()["detail"]
        assert response.json()["errors"][0]["field"] == "metadata.resourceVersion"
        kyma.refresh_from_db()
        assert kyma.channel == "fast" and kyma.labels == {}

    def test_given_stale_resource_version_when_posted_then_409(self, api):
        kyma = KymaFactory()
        doc = api.get(f"/api/v1/kymas/{kyma.uid}/").json()
        someone_changes_channel(kyma)
        assert api.post("/api/v1/kymas/", doc, format="json").status_code == 409

    def test_given_current_resource_version_when_put_then_200(self, api):
        kyma = KymaFactory(channel="regular")
        doc = api.get(f"/api/v1/kymas/{kyma.uid}/").json()
        doc["spec"]["channel"] = "fast"
        response = api.put(f"/api/v1/kymas/{kyma.uid}/", doc, format="json")
        assert response.status_code == 200 and response.json()["spec"]["channel"] == "fast"

    def test_given_no_resource_version_when_put_then_unconditional_like_kubectl_apply(self, api):
        kyma = KymaFactory(channel="regular")
        doc = api.get(f"/api/v1/kymas/{kyma.uid}/").json()
        someone_changes_channel(kyma, "fast")
        del doc["metadata"]["resourceVersion"]
        doc["spec"]["channel"] = "regular"
        assert api.put(f"/api/v1/kymas/{kyma.uid}/", doc, format="json").status_code == 200
        kyma.refresh_from_db()
        assert kyma.channel == "regular"

    def test_given_stale_document_in_multi_document_apply_then_409_and_nothing_applied(self, api):
        kyma, watcher = KymaFactory(), WatcherFactory()
        kyma_doc = api.get(f"/api/v1/kymas/{kyma.uid}/").json()
        watcher_doc = api.get(f"/api/v1/watchers/{watcher.uid}/").json()
        watcher_doc["metadata"]["labels"] = {"changed": "yes"}
        someone_changes_channel(kyma)
        response = api.post("/api/v1/apply/", [watcher_doc, kyma_doc], format="json")
        assert response.status_code == 409, response.json()
        assert response.json()["errors"][0]["field"] == "documents[1].metadata.resourceVersion"
        watcher.refresh_from_db()
        assert watcher.labels == {}


class TestApplyCommand:
    def _export(self, api, kyma: Kyma, tmp_path) -> str:
        path = tmp_path / "kyma.yaml"
        doc = api.get(f"/api/v1/kymas/{kyma.uid}/").json()
        doc["spec"]["channel"] = "regular"
        path.write_text(yaml.safe_dump(doc))
        return str(path)

    def test_given_stale_file_when_applied_then_refused(self, api, tmp_path):
        kyma = KymaFactory(channel="regular")
        path = self._export(api, kyma, tmp_path)
        someone_changes_channel(kyma, "fast")
        with pytest.raises(CommandError, match="has been modified"):
            call_command("apply", "-f", path, stdout=io.StringIO())
        kyma.refresh_from_db()
        assert kyma.channel == "fast"

    def test_given_stale_file_when_applied_with_force_then_written(self, api, tmp_path):
        kyma = KymaFactory(channel="regular")
        path = self._export(api, kyma, tmp_path)
        someone_changes_channel(kyma, "fast")
        out = io.StringIO()
        call_command("apply", "-f", path, "--force", stdout=out)
        kyma.refresh_from_db()
        assert kyma.channel == "regular" and "configured" in out.getvalue()


class TestAdminForm:
    def _form_data(self, page) -> dict:
        form = page.context["adminform"].form
        data = {}
        for name, field in form.fields.items():
            value = form[name].value()
            if value is None or value is False:
                continue
            data[name] = "on" if value is True else field.widget.format_value(value)
        return data

    def test_given_form_opened_before_a_change_when_saved_untouched_then_refused_naming_the_field(
        self, client, admin_user
    ):
        client.force_login(admin_user)
        kyma = KymaFactory(channel="regular")
        url = f"/admin/controlplane/kyma/{kyma.pk}/edit/"  # the edit form, apart from the Kyma page
        page = client.get(url)
        data = self._form_data(page)
        assert "opened_version" in data
        someone_changes_channel(kyma, "fast")
        response = client.post(url, data)
        assert response.status_code == 200  # the form again, with the error
        text = response.content.decode()
        assert "changed since you opened" in text and "channel" in text
        kyma.refresh_from_db()
        assert kyma.channel == "fast"

    def test_given_form_opened_after_the_last_change_when_saved_then_written(self, client, admin_user):
        client.force_login(admin_user)
        kyma = KymaFactory(channel="regular")
        url = f"/admin/controlplane/kyma/{kyma.pk}/edit/"  # the edit form, apart from the Kyma page
        data = self._form_data(client.get(url))
        data["channel"] = "fast"
        response = client.post(url, data)
        assert response.status_code == 302, response.context["adminform"].form.errors
        kyma.refresh_from_db()
        assert kyma.channel == "fast"
