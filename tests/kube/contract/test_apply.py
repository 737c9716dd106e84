"""Server-side apply, as the control plane uses it for everything it puts into a runtime
(``fleet.k8s.client.RuntimeClient.apply``: ``force=true``, one field manager): creation, no-op
repeats, conflicts with other managers and ``force``, managed fields, fields no longer applied,
and a manifest that does not fit its kind."""

from __future__ import annotations

from typing import Any

import pytest

from tests.kube.contract.calls import STRATEGIC, Client, fields_of, managers, path
from tests.kube.contract.resources import API_VERSION

KCP = "kyma-control-plane"


@pytest.fixture
def client(backend, widgets_served) -> Client:
    return Client(backend.api)


def config_map(
    name: str, namespace: str, data: dict[str, Any], labels: dict[str, str] | None = None
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if labels:
        meta["labels"] = labels
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}


def deployment(name: str, namespace: str, containers: list[dict[str, Any]]) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": containers}},
        },
    }


def test_apply_creates_updates_and_a_repeat_changes_nothing(client, ns):
    where = path("v1", "configmaps", ns, "c")
    doc = config_map("c", ns, {"k": "v"}, labels={"a": "b"})

    created = client.apply(where, doc, manager=KCP)
    updated = client.apply(where, {**doc, "data": {"k": "w"}}, manager=KCP)
    repeated = client.apply(where, {**doc, "data": {"k": "w"}}, manager=KCP)

    assert created.status == 201
    assert created.body["data"] == {"k": "v"}
    assert managers(created.body) == {(KCP, "Apply", "")}
    assert fields_of(created.body, KCP, "Apply") == {
        "f:data": {"f:k": {}},
        "f:metadata": {"f:labels": {"f:a": {}}},
    }
    assert updated.status == 200
    assert updated.body["data"] == {"k": "w"}
    assert updated.body["metadata"]["resourceVersion"] != created.body["metadata"]["resourceVersion"]
    assert repeated.status == 200
    assert repeated.body["metadata"]["resourceVersion"] == updated.body["metadata"]["resourceVersion"]


def test_a_field_another_manager_applied_differently_conflicts_and_names_it(client, ns):
    where = path("v1", "configmaps", ns, "c")
    client.apply(where, config_map("c", ns, {"k": "v"}), manager="one")

    refused = client.apply(where, config_map("c", ns, {"k": "w"}), manager="two")
    shared = client.apply(where, config_map("c", ns, {"k": "v"}), manager="two")

    assert refused.status == 409
    assert refused.reason == "Conflict"
    assert refused.message == 'Apply failed with 1 conflict: conflict with "one": .data.k'
    assert refused.causes == {(".data.k", "FieldManagerConflict")}
    assert [c["message"] for c in refused.body["details"]["causes"]] == ['conflict with "one"']
    # The same value is no conflict: both own the field.
    assert shared.status == 200
    assert managers(shared.body) == {("one", "Apply", ""), ("two", "Apply", "")}
    assert fields_of(shared.body, "two", "Apply") == {"f:data": {"f:k": {}}}
    assert client.get(where).body["data"] == {"k": "v"}


def test_force_takes_a_conflicting_field_over(client, ns):
    where = path("v1", "configmaps", ns, "c")
    client.apply(where, config_map("c", ns, {"k": "v", "other": "x"}), manager="one")

    forced = client.apply(where, config_map("c", ns, {"k": "w"}), manager="two", force=True)

    assert forced.status == 200
    assert forced.body["data"] == {"k": "w", "other": "x"}
    assert fields_of(forced.body, "one", "Apply") == {"f:data": {"f:other": {}}}
    assert fields_of(forced.body, "two", "Apply") == {"f:data": {"f:k": {}}}


def test_an_edit_by_update_conflicts_with_the_next_apply_until_it_is_forced(client, ns):
    """Drift: a user edits what the control plane applied; its next apply (forced) puts it back."""
    where = path("v1", "configmaps", ns, "c")
    client.apply(where, config_map("c", ns, {"level": "1"}), manager=KCP)

    edited = client.merge(where, {"data": {"level": "2"}}, manager="kubectl-edit")
    refused = client.apply(where, config_map("c", ns, {"level": "1"}), manager=KCP)
    forced = client.apply(where, config_map("c", ns, {"level": "1"}), manager=KCP, force=True)

    assert edited.status == 200
    assert ("kubectl-edit", "Update", "") in managers(edited.body)
    assert fields_of(edited.body, "kubectl-edit", "Update") == {"f:data": {"f:level": {}}}
    assert refused.status == 409
    assert (
        refused.message == 'Apply failed with 1 conflict: conflict with "kubectl-edit" using v1: .data.level'
    )
    assert forced.status == 200
    assert forced.body["data"] == {"level": "1"}
    assert managers(forced.body) == {(KCP, "Apply", "")}


def test_apply_removes_what_its_manager_stopped_applying_but_not_what_others_own(client, ns):
    where = path("v1", "configmaps", ns, "c")
    client.apply(where, config_map("c", ns, {"a": "1", "b": "2"}, labels={"x": "y"}), manager=KCP)
    client.merge(where, {"data": {"c": "3"}}, manager="user")

    answer = client.apply(where, config_map("c", ns, {"a": "1"}), manager=KCP)

    assert answer.status == 200
    assert answer.body["data"] == {"a": "1", "c": "3"}
    assert "x" not in (answer.body["metadata"].get("labels") or {})


def test_apply_needs_a_field_manager(client, ns):
    answer = client.apply(path("v1", "configmaps", ns, "c"), config_map("c", ns, {}), manager=None)

    assert answer.status == 422
    assert answer.reason == "Invalid"
    assert "fieldManager: Required value: is required for apply patch" in answer.message


def test_apply_into_a_missing_namespace_is_404(client, ns):
    answer = client.apply(
        path("v1", "configmaps", f"{ns}-missing", "c"), config_map("c", f"{ns}-missing", {}), manager=KCP
    )

    assert answer.status == 404
    assert answer.message == f'namespaces "{ns}-missing" not found'


def test_a_manifest_that_does_not_fit_its_kind_is_a_500_and_changes_nothing(client, ns):
    """What ``fleet.k8s.client`` translates into a permanent error (TYPED_PATCH_FAILED)."""
    where = path("v1", "configmaps", ns, "c")
    new = client.apply(path("v1", "configmaps", ns, "n"), config_map("n", ns, {"k": 5}), manager=KCP)
    client.apply(where, config_map("c", ns, {"k": "v"}), manager=KCP)
    number = client.apply(where, config_map("c", ns, {"k": 5}), manager=KCP, force=True)
    unknown = client.apply(where, {**config_map("c", ns, {"k": "v"}), "foo": 1}, manager=KCP, force=True)
    replicas = deployment("d", ns, [{"name": "c", "image": "nginx"}])
    replicas["spec"]["replicas"] = "2"
    deploy = client.apply(path("apps/v1", "deployments", ns, "d"), replicas, manager=KCP)

    assert new.status == 500
    assert new.message.startswith(f"failed to create typed patch object ({ns}/n; /v1, Kind=ConfigMap): ")
    assert ".data.k: expected string, got " in new.message
    assert client.get(path("v1", "configmaps", ns, "n")).status == 404
    assert number.status == 500
    assert number.message.startswith(f"failed to create typed patch object ({ns}/c; /v1, Kind=ConfigMap): ")
    assert unknown.status == 500
    assert unknown.message.endswith(": .foo: field not declared in schema")
    assert client.get(where).body["data"] == {"k": "v"}
    assert deploy.status == 500
    assert ".spec.replicas: expected numeric (int or float), got string" in deploy.message


def test_create_of_an_existing_object_is_409_already_exists(client, ns):
    where = path("v1", "configmaps", ns)
    first = client.create(where, config_map("c", ns, {}))

    again = client.create(where, config_map("c", ns, {}))

    assert first.status == 201
    assert again.status == 409
    assert again.reason == "AlreadyExists"
    assert again.message == 'configmaps "c" already exists'
    assert again.body["details"] == {"name": "c", "kind": "configmaps"}


def test_create_drops_unknown_fields_and_strict_field_validation_refuses_them(client, ns):
    where = path("v1", "configmaps", ns)

    lenient = client.create(where, {**config_map("a", ns, {"k": "v"}), "foo": 1})
    strict = client.create(where, {**config_map("b", ns, {"k": "v"}), "foo": 1}, fieldValidation="Strict")

    assert lenient.status == 201
    assert "foo" not in lenient.body
    assert "foo" not in client.get(path("v1", "configmaps", ns, "a")).body
    assert strict.status == 400
    assert strict.reason == "BadRequest"
    assert strict.message.endswith('strict decoding error: unknown field "foo"')


def test_list_map_entries_of_a_built_in_kind_are_owned_one_by_one(client, ns):
    """A container's env entry a user added survives the control plane's next apply (it owns only
    the entries it applied); its own entries follow what it applies."""
    where = path("apps/v1", "deployments", ns, "d")
    mine = [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]
    ports = [{"containerPort": 80}]
    applied = client.apply(
        where,
        deployment("d", ns, [{"name": "c", "image": "nginx", "env": mine, "ports": ports}]),
        manager=KCP,
    )
    live = applied.body["spec"]["template"]["spec"]["containers"]
    user_env = [*live[0]["env"], {"name": "U", "value": "user"}]
    client.merge(
        where,
        {"spec": {"template": {"spec": {"containers": [{**live[0], "env": user_env}]}}}},
        manager="kubectl-edit",
    )

    again = client.apply(
        where,
        deployment("d", ns, [{"name": "c", "image": "nginx", "env": mine[:1], "ports": ports}]),
        manager=KCP,
        force=True,
    )

    assert applied.status == 201
    container = {
        'k:{"name":"c"}': {
            ".": {},
            "f:env": {
                'k:{"name":"A"}': {".": {}, "f:name": {}, "f:value": {}},
                'k:{"name":"B"}': {".": {}, "f:name": {}, "f:value": {}},
            },
            "f:image": {},
            "f:name": {},
            "f:ports": {'k:{"containerPort":80,"protocol":"TCP"}': {".": {}, "f:containerPort": {}}},
        }
    }
    assert fields_of(applied.body, KCP, "Apply") == {
        "f:spec": {
            "f:replicas": {},
            "f:selector": {},
            "f:template": {
                "f:metadata": {"f:labels": {"f:app": {}}},
                "f:spec": {"f:containers": container},
            },
        }
    }
    assert again.status == 200
    env = again.body["spec"]["template"]["spec"]["containers"][0]["env"]
    assert env == [{"name": "A", "value": "1"}, {"name": "U", "value": "user"}]


def test_a_strategic_merge_patch_merges_keyed_lists_and_a_custom_resource_refuses_it(client, ns):
    """What typed clients send for a dict patch (``AppsV1Api.patch_namespaced_deployment``)."""
    where = path("apps/v1", "deployments", ns, "d")
    containers = [
        {"name": "main", "image": "nginx:1", "env": [{"name": "A", "value": "1"}]},
        {"name": "sidecar", "image": "envoy:1"},
    ]
    client.apply(where, deployment("d", ns, containers), manager=KCP)
    client.merge(where, {"metadata": {"finalizers": ["contract.example.com/a", "contract.example.com/c"]}})

    patched = client.call(
        "PATCH",
        where,
        {
            "metadata": {
                "finalizers": ["contract.example.com/b"],
                "$deleteFromPrimitiveList/finalizers": ["contract.example.com/c"],
            },
            "spec": {
                "replicas": 0,
                "template": {
                    "spec": {
                        "containers": [
                            {"name": "main", "image": "nginx:2", "env": [{"name": "B", "value": "2"}]},
                            {"name": "sidecar", "$patch": "delete"},
                        ]
                    }
                },
            },
        },
        content_type=STRATEGIC,
    )
    custom = client.call(
        "PATCH", path(API_VERSION, "widgets", ns, "w"), {"spec": {"a": 1}}, content_type=STRATEGIC
    )

    assert patched.status == 200
    assert patched.body["spec"]["replicas"] == 0
    (main,) = patched.body["spec"]["template"]["spec"]["containers"]
    assert (main["name"], main["image"]) == ("main", "nginx:2")
    # New entries go first, existing ones keep their order (as without $setElementOrder).
    assert main["env"] == [{"name": "B", "value": "2"}, {"name": "A", "value": "1"}]
    assert patched.body["metadata"]["finalizers"] == ["contract.example.com/b", "contract.example.com/a"]
    assert custom.status == 415
    assert custom.reason == "UnsupportedMediaType"
    assert custom.message == (
        "the body of the request was in an unknown format - accepted media types include: "
        "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
    )


def test_a_priority_class_is_answered_with_its_defaults_and_without_a_false_global_default(client, ns):
    """A boolean field that is false (``omitempty`` in Go) is left out of every answer: an object
    compared with what was applied must not count its absence as a change (reconciler.drift)."""
    where = path("scheduling.k8s.io/v1", "priorityclasses", None, f"contract-{ns}")
    doc = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": f"contract-{ns}"},
        "value": 1000,
        "globalDefault": False,
    }
    try:
        applied = client.apply(where, doc, manager="contract")
        read = client.get(where)
    finally:
        client.delete(where)

    for answer in (applied, read):
        assert answer.ok, answer.message
        assert "globalDefault" not in answer.body
        assert answer.body["preemptionPolicy"] == "PreemptLowerPriority"
    fields = next(f for f in applied.body["metadata"]["managedFields"] if f["manager"] == "contract")
    assert "f:globalDefault" in fields["fieldsV1"]  # still the manager's field


def test_managed_fields_set_by_a_json_patch_replace_the_stored_ones(client, ns):
    """What a take-over of another manager's fields relies on (``reconciler.apply.take_over``):
    a JSON patch of ``metadata.managedFields`` stores them as given, and the next apply of the
    manager that received them prunes what only the other had set."""
    where = path("v1", "configmaps", ns, "taken")
    ours = config_map("taken", ns, {"a": "1"})
    assert client.apply(where, ours, manager="ours").ok
    theirs = client.apply(where, config_map("taken", ns, {"b": "2"}), manager="theirs").body
    assert {m for m, _, _ in managers(theirs)} == {"ours", "theirs"}

    entries = theirs["metadata"]["managedFields"]
    mine = next(e for e in entries if e["manager"] == "ours")
    merged = {**mine, "fieldsV1": {"f:data": {"f:a": {}, "f:b": {}}}}
    patched = client.json_patch(
        where,
        [
            {
                "op": "test",
                "path": "/metadata/resourceVersion",
                "value": theirs["metadata"]["resourceVersion"],
            },
            {"op": "replace", "path": "/metadata/managedFields", "value": [merged]},
        ],
    )
    assert patched.ok, patched.message
    assert managers(patched.body) == {("ours", "Apply", "")}
    assert fields_of(patched.body, "ours", "Apply") == {"f:data": {"f:a": {}, "f:b": {}}}

    again = client.apply(where, ours, manager="ours").body
    assert again["data"] == {"a": "1"}  # b was ours alone now, and no longer applied: pruned
