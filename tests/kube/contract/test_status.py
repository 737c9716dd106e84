"""The status subresource and ``metadata.generation``, as the control plane relies on them: it
applies a custom resource's spec on the main resource, writes its status with a merge patch on
``/status`` (``fleet.k8s.client.RuntimeClient.patch_status``), and tells a user's spec edit from
anything else by the generation (``reconciler.runtime_kyma``, module CRs)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.kube.contract.calls import Client, fields_of, managers, path
from tests.kube.contract.resources import API_VERSION, widget

KCP = "kyma-control-plane"


@pytest.fixture
def client(backend, widgets_served) -> Client:
    return Client(backend.api)


def summary(obj: dict[str, Any]) -> tuple[Any, Any, Any, Any]:
    meta = obj["metadata"]
    return obj.get("spec"), obj.get("status"), meta.get("labels"), meta.get("generation")


def test_status_is_only_written_through_the_status_subresource(client, ns):
    where = path(API_VERSION, "widgets", ns, "w")

    created = client.apply(where, widget("w", ns, spec={"a": 1}, status={"s": 1}), manager=KCP)
    status = client.merge(
        where + "/status",
        {"status": {"s": 2}, "spec": {"a": 9}, "metadata": {"labels": {"x": "y"}}},
        manager=KCP,
    )
    main = client.merge(where, {"status": {"s": 3}, "metadata": {"labels": {"x": "y"}}}, manager="user")
    replaced = client.put(where + "/status", {**main.body, "spec": {"a": 100}, "status": {"u": 1}})

    assert created.status == 201
    assert summary(created.body) == ({"a": 1}, None, None, 1)
    assert fields_of(created.body, KCP, "Apply") == {"f:spec": {"f:a": {}}}
    assert summary(status.body) == ({"a": 1}, {"s": 2}, None, 1)
    assert managers(status.body) == {(KCP, "Apply", ""), (KCP, "Update", "status")}
    assert fields_of(status.body, KCP, "Update", "status") == {"f:status": {".": {}, "f:s": {}}}
    assert summary(main.body) == ({"a": 1}, {"s": 2}, {"x": "y"}, 1)
    assert fields_of(main.body, "user", "Update") == {"f:metadata": {"f:labels": {".": {}, "f:x": {}}}}
    assert summary(replaced.body) == ({"a": 1}, {"u": 1}, {"x": "y"}, 1)
    # The earlier status writer still owns the status map itself, no longer its field.
    assert fields_of(replaced.body, KCP, "Update", "status") == {"f:status": {}}


def test_a_server_side_apply_of_the_status_has_its_own_field_manager_entry(client, ns):
    where = path(API_VERSION, "widgets", ns, "w")
    client.apply(where, widget("w", ns, spec={"a": 1}), manager=KCP)

    applied = client.apply(
        where + "/status", widget("w", ns, status={"t": 1}, spec={"a": 2}), manager="reporter"
    )
    missing = client.merge(path(API_VERSION, "widgets", ns, "nope") + "/status", {"status": {"s": 1}})

    assert applied.status == 200
    assert summary(applied.body) == ({"a": 1}, {"t": 1}, None, 1)
    assert ("reporter", "Apply", "status") in managers(applied.body)
    assert fields_of(applied.body, "reporter", "Apply", "status") == {"f:status": {"f:t": {}}}
    assert missing.status == 404
    assert missing.message == 'widgets.contract.example.com "nope" not found'


def test_generation_moves_with_the_spec_only(client, ns):
    where = path(API_VERSION, "widgets", ns, "w")
    client.apply(where, widget("w", ns, spec={"a": 1}), manager=KCP)

    labelled = client.merge(where, {"metadata": {"labels": {"x": "y"}, "annotations": {"n": "o"}}})
    status = client.merge(where + "/status", {"status": {"s": 1}})
    spec = client.merge(where, {"spec": {"a": 2}}, manager="user")
    same = client.merge(where, {"spec": {"a": 2}}, manager="user")

    assert [r.body["metadata"]["generation"] for r in (labelled, status, spec, same)] == [1, 1, 2, 2]
    assert same.body["metadata"]["resourceVersion"] == spec.body["metadata"]["resourceVersion"]


def test_built_in_generation_moves_with_the_spec_and_config_maps_have_none(client, ns):
    labels = {"app": "d"}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d", "namespace": ns},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "c", "image": "nginx"}]},
            },
        },
    }
    where = path("apps/v1", "deployments", ns, "d")
    client.apply(where, deployment, manager=KCP)

    labelled = client.merge(where, {"metadata": {"labels": {"x": "y"}}})
    scaled = client.merge(where, {"spec": {"replicas": 0}}, manager="user")
    config_map = client.create(path("v1", "configmaps", ns), {"metadata": {"name": "c"}, "data": {"k": "v"}})

    assert labelled.body["metadata"]["generation"] == 1
    assert scaled.body["metadata"]["generation"] == 2
    assert "generation" not in config_map.body["metadata"]
