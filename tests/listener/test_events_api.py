"""``GET /api/v1/events/``: the listener's recorded WatchEvents, newest first, read only."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from fleet.models import Kyma
from fleet.services import kymas as kyma_services
from listener.models import EventOutcome, WatchEventRecord
from tests.console.test_api import KUBECONFIG
from tests.factories import KymaFactory

pytestmark = pytest.mark.django_db

URL = "/api/v1/events/"
T0 = timezone.now().replace(microsecond=0) - dt.timedelta(hours=1)


def record(kyma: Kyma, minutes: int, component: str = "lifecycle-manager", **fields: object):
    fields = {"outcome": EventOutcome.QUEUED, **fields}
    return WatchEventRecord.objects.create(
        kyma=kyma,
        received_at=T0 + dt.timedelta(minutes=minutes),
        component=component,
        contract="v2",
        watched_namespace="kyma-system",
        watched_name=f"obj-{minutes}",
        gvk_group="operator.kyma-project.io",
        gvk_version="v1beta2",
        gvk_kind="Kyma",
        **fields,
    )


@pytest.fixture
def events() -> dict[str, Kyma]:
    one = KymaFactory(name="k-one", runtime_id="rt-one")
    kyma_services.kyma_set_kubeconfig(kyma=one, kubeconfig=KUBECONFIG)
    two = KymaFactory(name="k-two", runtime_id="rt-two")
    record(one, 1)
    record(one, 3, component="compass", outcome=EventOutcome.FORWARDED, count=4)
    record(two, 2)
    return {"one": one, "two": two}


def names(response) -> list[str]:
    assert response.status_code == 200, response.json()
    return [entry["watched"]["name"] for entry in response.json()["results"]]


def test_given_events_when_listed_then_newest_first_in_the_documented_shape(api, events):
    response = api.get(URL)
    assert names(response) == ["obj-3", "obj-2", "obj-1"]
    body = response.json()
    assert body["count"] == 3
    newest = body["results"][0]
    assert newest == {
        "id": newest["id"],
        "received_at": (T0 + dt.timedelta(minutes=3)).isoformat().replace("+00:00", "Z"),
        "kyma": {"namespace": events["one"].namespace, "name": "k-one", "runtime_id": "rt-one"},
        "component": "compass",
        "contract": "v2",
        "watched": {"namespace": "kyma-system", "name": "obj-3"},
        "watched_gvk": {"group": "operator.kyma-project.io", "version": "v1beta2", "kind": "Kyma"},
        "outcome": "forwarded",
        "count": 4,
    }
    text = response.content.decode()
    assert "very-secret-token" not in text and "kubeconfig" not in text


def test_given_many_events_when_listed_then_paginated_like_the_other_lists(api, events):
    body = api.get(URL + "?limit=2").json()
    assert body["count"] == 3 and len(body["results"]) == 2 and "offset=2" in body["next"]


@pytest.mark.parametrize("value", ["k-one", "rt-one"])
def test_given_a_kyma_by_name_or_runtime_id_when_filtered_then_only_its_events(api, events, value):
    assert names(api.get(URL, {"kyma": value})) == ["obj-3", "obj-1"]


def test_given_a_kyma_as_namespace_slash_name_when_filtered_then_only_its_events(api, events):
    assert names(api.get(URL, {"kyma": f"{events['two'].namespace}/k-two"})) == ["obj-2"]


def test_given_a_component_when_filtered_then_only_its_events(api, events):
    assert names(api.get(URL, {"component": "lifecycle-manager"})) == ["obj-2", "obj-1"]


@pytest.mark.parametrize(
    "since",
    [
        (T0 + dt.timedelta(minutes=2)).isoformat(),
        (T0 + dt.timedelta(minutes=2)).astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        (T0 + dt.timedelta(minutes=2)).astimezone(dt.timezone(dt.timedelta(hours=2))).isoformat(),
    ],
    ids=["offset", "zulu", "other-offset"],
)
def test_given_since_when_filtered_then_events_from_that_moment_on(api, events, since):
    assert names(api.get(URL, {"since": since})) == ["obj-3", "obj-2"]


@pytest.mark.parametrize("since", ["yesterday", "2024-01-01", "2024-01-01T10:00:00", "2024-13-01T00:00:00Z"])
def test_given_a_bad_since_when_filtered_then_400_naming_the_parameter(api, events, since):
    response = api.get(URL, {"since": since})
    assert response.status_code == 400
    assert [e["field"] for e in response.json()["errors"]] == ["since"]
    assert "RFC 3339" in response.json()["errors"][0]["reason"]


def test_given_no_credentials_when_listing_then_401(client, events):
    assert client.get(URL).status_code == 401


def test_given_a_user_without_the_view_permission_when_listing_then_403(user_with, events):
    assert user_with().get(URL).status_code == 403
    assert user_with("listener.view_watcheventrecord").get(URL).status_code == 200


def test_given_the_api_when_writing_then_read_only(api, events):
    assert api.post(URL, {}, format="json").status_code == 405


def test_given_the_schema_then_events_are_documented(api):
    schema = api.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    parameters = {p["name"] for p in schema["paths"]["/api/v1/events/"]["get"]["parameters"]}
    assert {"kyma", "component", "since", "limit", "offset"} <= parameters
