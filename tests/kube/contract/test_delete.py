"""Deleting, as the control plane deletes (``fleet.k8s.client.RuntimeClient.delete``: a body with
``propagationPolicy: Background``, a 404 meaning "gone already"), finalizers holding an object and
its namespace back, and discovery (how the client learns a custom resource's plural and scope, and
that a resource type is not served)."""

from __future__ import annotations

import pytest

from tests.kube.contract.backends import wait_for
from tests.kube.contract.calls import Client, path
from tests.kube.contract.resources import API_VERSION, widget

BACKGROUND = {"propagationPolicy": "Background"}


@pytest.fixture
def client(backend, widgets_served) -> Client:
    return Client(backend.api)


def test_a_delete_answers_a_status_or_the_object_and_a_missing_one_is_404(client, ns):
    config_map = client.create(path("v1", "configmaps", ns), {"metadata": {"name": "c"}}).body
    custom_resource = client.create(path(API_VERSION, "widgets", ns), widget("w", ns, spec={"a": 1})).body

    deleted = client.delete(path("v1", "configmaps", ns, "c"), BACKGROUND)
    custom = client.delete(path(API_VERSION, "widgets", ns, "w"), BACKGROUND)
    again = client.delete(path("v1", "configmaps", ns, "c"), BACKGROUND)
    bogus = client.delete(path("v1", "configmaps", ns, "x"), {"propagationPolicy": "Sometimes"})

    assert deleted.status == 200
    assert deleted.body == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": {"name": "c", "kind": "configmaps", "uid": config_map["metadata"]["uid"]},
    }
    assert custom.status == 200
    assert custom.body["kind"] == "Status"
    assert custom.body["details"] == {
        "name": "w",
        "group": "contract.example.com",
        "kind": "widgets",
        "uid": custom_resource["metadata"]["uid"],
    }
    assert again.status == 404
    assert again.body["details"] == {"name": "c", "kind": "configmaps"}
    assert again.message == 'configmaps "c" not found'
    assert bogus.status == 422
    assert bogus.causes == {("propagationPolicy", "FieldValueNotSupported")}


def test_a_finalizer_holds_an_object_until_it_is_removed(client, ns):
    where = path(API_VERSION, "widgets", ns, "w")
    client.create(path(API_VERSION, "widgets", ns), widget("w", ns, spec={"a": 1}))
    client.merge(where, {"metadata": {"finalizers": ["contract.example.com/hold"]}})

    deleting = client.delete(where, BACKGROUND)
    held = client.get(where)
    edited = client.merge(where, {"spec": {"a": 2}})
    again = client.delete(where, BACKGROUND)
    released = client.merge(where, {"metadata": {"finalizers": None}})

    assert deleting.status == 200
    # (the answer is the object, with its finalizers: RuntimeClient.delete_pending reads them)
    assert deleting.body["metadata"]["deletionTimestamp"]
    assert deleting.body["metadata"]["finalizers"] == ["contract.example.com/hold"]
    assert held.status == 200
    assert held.body["metadata"]["deletionTimestamp"] == deleting.body["metadata"]["deletionTimestamp"]
    assert edited.status == 200  # a deleting object can still change (its status, its finalizers)
    assert again.status == 200
    assert again.body["metadata"]["deletionTimestamp"] == deleting.body["metadata"]["deletionTimestamp"]
    assert released.status == 200
    assert client.get(where).status == 404


def test_a_namespace_being_deleted_refuses_new_objects_while_a_finalizer_holds_its_content(backend, client):
    ns = backend.namespace("terminating")
    where = path(API_VERSION, "widgets", ns, "w")
    client.create(path(API_VERSION, "widgets", ns), widget("w", ns, spec={"a": 1}))
    client.merge(where, {"metadata": {"finalizers": ["contract.example.com/hold"]}})

    deleting = client.delete(path("v1", "namespaces", None, ns), BACKGROUND)

    assert deleting.status == 200
    assert deleting.body["status"]["phase"] == "Terminating"
    wait_for(
        lambda: client.get(where).body["metadata"].get("deletionTimestamp"), what="the widget being deleted"
    )
    refused = client.create(path("v1", "configmaps", ns), {"metadata": {"name": "late"}})
    assert refused.status == 403
    assert refused.reason == "Forbidden"
    assert refused.message == (
        f'configmaps "late" is forbidden: unable to create new content in namespace {ns} '
        "because it is being terminated"
    )
    released = client.merge(where, {"metadata": {"finalizers": None}})
    assert released.status == 200
    assert client.get(where).status == 404  # (the namespace follows when its controller next looks)


def test_discovery_lists_a_served_kind_and_404s_what_is_not_served(client):
    served = client.get("/apis/contract.example.com/v1")
    unserved_version = client.get("/apis/contract.example.com/v2")
    unknown_group = client.get("/apis/nothing.example.com/v1")
    unknown_resource = client.get("/apis/contract.example.com/v1/namespaces/default/gadgets")
    built_in_version = client.get("/apis/apps/v9")
    version = client.get("/version")

    assert served.status == 200
    widgets = next(r for r in served.body["resources"] if r["name"] == "widgets")
    assert (widgets["kind"], widgets["namespaced"]) == ("Widget", True)
    assert {r["name"] for r in served.body["resources"]} == {"widgets", "widgets/status"}
    assert client.get("/apis/contract.example.com/v1beta1").status == 200
    # Outside the API server's own groups a path nobody serves is a plain-text 404.
    for answer in (unserved_version, unknown_group, unknown_resource):
        assert (answer.status, answer.body) == (404, "404 page not found\n")
    assert built_in_version.status == 404
    assert built_in_version.body["message"] == "the server could not find the requested resource"
    assert (version.body["major"], version.body["minor"]) == ("1", "37")  # (envtest/build's release)
