"""One FilterSet per list: the API's query parameters and the admin's filters and search agree."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from fleet.models import Kyma
from tests.factories import KymaFactory, WatcherFactory

pytestmark = pytest.mark.django_db


def api_names(api, query: str, kind: str = "kymas") -> set[str]:
    response = api.get(f"/api/v1/{kind}/?{query}")
    assert response.status_code == 200, response.content
    return {item["metadata"]["name"] for item in response.json()["results"]}


def admin_names(admin_client, query: str, path: str = "/admin/controlplane/kyma/") -> set[str]:
    page = admin_client.get(f"{path}?{query}")
    assert page.status_code == 200, page  # an unknown parameter would redirect to ?e=1
    return {obj.name for obj in page.context["cl"].result_list}


@pytest.fixture
def fleet_of_kymas():
    now = timezone.now()
    new = KymaFactory(name="fresh", state="")
    ready = KymaFactory(name="steady", state="Ready", watcher_last_seen_at=now, channel="fast")
    silent = KymaFactory(
        name="quiet", state="Ready", watcher_last_seen_at=now - dt.timedelta(hours=1), kubeconfig=""
    )
    failing = KymaFactory(name="broken", state="Error", runtime_id="rt-special")
    return new, ready, silent, failing


def test_given_unreconciled_kymas_then_state_new_selects_them_in_the_api_and_the_admin(
    api, admin_client, fleet_of_kymas
):
    assert api_names(api, "state=New") == {"fresh"}
    assert admin_names(admin_client, "state=New") == {"fresh"}
    assert api_names(api, "state=Ready&state=Error") == {"steady", "quiet", "broken"}


def test_given_a_search_then_the_admin_box_finds_what_the_api_q_finds(api, admin_client, fleet_of_kymas):
    assert api_names(api, "q=special") == admin_names(admin_client, "q=special") == {"broken"}


def test_given_watcher_liveness_then_the_api_filters_like_the_admin(
    api, admin_client, settings, fleet_of_kymas
):
    settings.WATCHER_SILENT_AFTER = 120

    assert api_names(api, "watcher=silent") == admin_names(admin_client, "watcher=silent") == {"quiet"}
    assert api_names(api, "watcher=seen") == {"steady"}
    assert api.get("/api/v1/kymas/?watcher=sometimes").status_code == 400


def test_given_the_channel_filter_then_admin_and_api_agree(api, admin_client, fleet_of_kymas):
    assert api_names(api, "channel=fast") == admin_names(admin_client, "channel=fast") == {"steady"}


def test_given_watchers_then_state_new_works_for_them_too(api, admin_client):
    WatcherFactory(name="w-new")

    assert "w-new" in api_names(api, "state=New", kind="watchers")
    assert "w-new" in admin_names(admin_client, "state=New", path="/admin/watchers/watcher/")
    assert Kyma.objects.count() == 0
