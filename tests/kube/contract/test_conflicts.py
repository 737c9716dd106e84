"""Optimistic concurrency: a write that names a resourceVersion (in its body, a JSON patch's test
or a delete precondition) is refused with 409 Conflict once the object moved on, whatever the
verb; without one, the last write wins."""

from __future__ import annotations

import pytest

from tests.kube.contract.calls import Client, path

STALE = (
    'Operation cannot be fulfilled on configmaps "c": the object has been modified; '
    "please apply your changes to the latest version and try again"
)


@pytest.fixture
def client(backend) -> Client:
    return Client(backend.api)


@pytest.fixture
def stale(client, ns) -> str:
    """The resourceVersion of ConfigMap ``c`` before a later write."""
    created = client.create(path("v1", "configmaps", ns), {"metadata": {"name": "c"}, "data": {"a": "1"}})
    client.merge(path("v1", "configmaps", ns, "c"), {"data": {"a": "2"}})
    return created.body["metadata"]["resourceVersion"]


def test_an_update_from_a_stale_read_is_409(client, ns, stale):
    where = path("v1", "configmaps", ns, "c")

    put = client.put(where, {"metadata": {"name": "c", "resourceVersion": stale}, "data": {"a": "3"}})
    merge = client.merge(where, {"metadata": {"resourceVersion": stale}, "data": {"a": "3"}})
    apply = client.apply(
        where,
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "resourceVersion": stale}},
        manager="m",
        force=True,
    )
    unconditional = client.put(where, {"metadata": {"name": "c"}, "data": {"a": "4"}})

    for refused in (put, merge, apply):
        assert refused.status == 409
        assert refused.reason == "Conflict"
        assert refused.message == STALE
        assert refused.body["details"] == {"name": "c", "kind": "configmaps"}
    assert unconditional.status == 200
    assert unconditional.body["data"] == {"a": "4"}


def test_a_json_patch_whose_test_fails_is_422(client, ns, stale):
    answer = client.json_patch(
        path("v1", "configmaps", ns, "c"),
        [
            {"op": "test", "path": "/metadata/resourceVersion", "value": stale},
            {"op": "replace", "path": "/data/a", "value": "3"},
        ],
    )

    assert answer.status == 422
    assert answer.reason == "Invalid"
    assert answer.message == "the server rejected our request due to an error in our request"
    assert client.get(path("v1", "configmaps", ns, "c")).body["data"] == {"a": "2"}


def test_a_delete_with_stale_preconditions_is_409(client, ns, stale):
    where = path("v1", "configmaps", ns, "c")
    live = client.get(where).body["metadata"]

    by_version = client.delete(where, {"preconditions": {"resourceVersion": stale}})
    by_uid = client.delete(where, {"preconditions": {"uid": "00000000-0000-0000-0000-000000000000"}})
    current = client.delete(
        where, {"preconditions": {"uid": live["uid"], "resourceVersion": live["resourceVersion"]}}
    )

    assert by_version.status == 409
    assert by_version.message == (
        f'Operation cannot be fulfilled on ConfigMap "c": the ResourceVersion in the precondition ({stale}) '
        f"does not match the ResourceVersion in record ({live['resourceVersion']}). "
        "The object might have been modified"
    )
    assert by_version.body["details"] == {"name": "c", "kind": "ConfigMap"}
    assert by_uid.status == 409
    assert by_uid.message == (
        'Operation cannot be fulfilled on ConfigMap "c": the UID in the precondition '
        f"(00000000-0000-0000-0000-000000000000) does not match the UID in record ({live['uid']}). "
        "The object might have been deleted and then recreated"
    )
    assert current.status == 200
    assert client.get(where).status == 404
