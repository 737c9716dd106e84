"""Object semantics through the typed clients: metadata, errors, selectors, status, namespaces, watch."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable

import pytest
from kubernetes import client, watch

from runtime_emulator import KubernetesError, RuntimeEmulator
from tests.runtime_emulator.helpers import deployment


def _status(error: pytest.ExceptionInfo[client.ApiException]) -> dict:
    return json.loads(error.value.body)


def test_given_a_create_then_server_metadata_is_stamped_and_resource_versions_increase(
    core: client.CoreV1Api,
):
    first = core.create_namespaced_config_map(
        "default", {"metadata": {"name": "a", "uid": "forged"}, "data": {"k": "v"}}
    )
    second = core.create_namespaced_config_map("default", {"metadata": {"name": "b"}})

    assert first.metadata.uid != "forged" and len(first.metadata.uid) == 36
    assert first.metadata.creation_timestamp is not None
    assert int(second.metadata.resource_version) > int(first.metadata.resource_version)
    assert first.metadata.generation is None  # like a real server: ConfigMaps have no generation
    assert first.metadata.managed_fields[0].manager == "OpenAPI-Generator"


def test_given_an_existing_object_when_created_again_then_409_already_exists(core: client.CoreV1Api):
    core.create_namespaced_secret("default", {"metadata": {"name": "s"}})

    with pytest.raises(client.ApiException) as raised:
        core.create_namespaced_secret("default", {"metadata": {"name": "s"}})

    assert raised.value.status == 409
    assert _status(raised) | {"details": None} == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'secrets "s" already exists',
        "reason": "AlreadyExists",
        "code": 409,
        "details": None,
    }


def test_given_no_object_when_read_replaced_or_deleted_then_404_not_found(apps: client.AppsV1Api):
    for call in (
        lambda: apps.read_namespaced_deployment("ghost", "default"),
        lambda: apps.replace_namespaced_deployment("ghost", "default", deployment("ghost")),
        lambda: apps.delete_namespaced_deployment("ghost", "default"),
    ):
        with pytest.raises(client.ApiException) as raised:
            call()
        assert raised.value.status == 404
        assert _status(raised)["message"] == 'deployments.apps "ghost" not found'


def test_given_a_stale_resource_version_when_replacing_then_409_conflict(core: client.CoreV1Api):
    created = core.create_namespaced_config_map("default", {"metadata": {"name": "cm"}, "data": {"v": "1"}})
    core.patch_namespaced_config_map("cm", "default", {"data": {"v": "2"}})

    created.data = {"v": "3"}
    with pytest.raises(client.ApiException) as raised:
        core.replace_namespaced_config_map("cm", "default", created)

    assert raised.value.status == 409 and _status(raised)["reason"] == "Conflict"
    assert "the object has been modified" in _status(raised)["message"]
    assert core.read_namespaced_config_map("cm", "default").data == {"v": "2"}


def _written_meanwhile(runtime: RuntimeEmulator, times: int) -> Callable[[dict], None]:
    """An edit that, the first ``times`` times it runs, finds someone else stored a new version of
    the ConfigMap between the user's read and the user's PUT (a controller writing its status)."""
    calls = []

    def mutate(obj: dict) -> None:
        calls.append(obj["metadata"]["resourceVersion"])
        if len(calls) <= times:
            other = copy.deepcopy(obj)
            other["data"]["other"] = str(len(calls))
            runtime.store.put(runtime.resource_type("configmaps").storage, other, "MODIFIED")
        obj["data"]["v"] = "edited"

    mutate.calls = calls  # type: ignore[attr-defined]
    return mutate


def test_given_a_write_between_read_and_put_when_editing_as_a_user_then_the_edit_is_redone_on_the_new_version(
    core: client.CoreV1Api, runtime: RuntimeEmulator
):
    core.create_namespaced_config_map("default", {"metadata": {"name": "cm"}, "data": {"v": "1"}})
    mutate = _written_meanwhile(runtime, times=2)

    edited = runtime.edit_as_user("configmaps", "cm", mutate, "default")

    assert edited["data"] == {"v": "edited", "other": "2"}  # nobody's write is lost
    assert len(mutate.calls) == 3 and len(set(mutate.calls)) == 3  # each time on a fresh read


def test_given_writes_between_every_read_and_put_when_editing_as_a_user_then_the_conflict_is_raised(
    core: client.CoreV1Api, runtime: RuntimeEmulator
):
    core.create_namespaced_config_map("default", {"metadata": {"name": "cm"}, "data": {"v": "1"}})

    with pytest.raises(KubernetesError) as raised:
        runtime.edit_as_user("configmaps", "cm", _written_meanwhile(runtime, times=100), "default")

    assert raised.value.status == 409 and raised.value.reason == "Conflict"
    assert core.read_namespaced_config_map("cm", "default").data["v"] == "1"


def test_given_a_current_resource_version_when_replacing_then_the_update_is_stored(core: client.CoreV1Api):
    current = core.create_namespaced_config_map("default", {"metadata": {"name": "cm"}, "data": {"v": "1"}})
    current.data = {"v": "2"}

    replaced = core.replace_namespaced_config_map("cm", "default", current)

    assert replaced.data == {"v": "2"}
    assert int(replaced.metadata.resource_version) > int(current.metadata.resource_version)


def test_given_an_unchanged_update_then_no_new_resource_version_is_made(core: client.CoreV1Api):
    current = core.create_namespaced_config_map("default", {"metadata": {"name": "cm"}, "data": {"v": "1"}})

    again = core.replace_namespaced_config_map("cm", "default", current)

    assert again.metadata.resource_version == current.metadata.resource_version


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("tier=web", ["a", "b"]),
        ("tier==web,env=prod", ["a"]),
        ("tier!=web", ["c", "d"]),
        ("env in (prod,stage)", ["a", "b", "c"]),
        ("env notin (prod)", ["b", "c", "d"]),
        ("tier", ["a", "b", "c"]),
        ("!tier", ["d"]),
    ],
)
def test_given_labelled_objects_when_listing_with_a_label_selector_then_only_matches_return(
    core: client.CoreV1Api, selector: str, expected: list[str]
):
    labels = {
        "a": {"tier": "web", "env": "prod"},
        "b": {"tier": "web", "env": "stage"},
        "c": {"tier": "db", "env": "stage"},
    }
    for name in "abcd":
        core.create_namespaced_config_map(
            "default", {"metadata": {"name": name, "labels": labels.get(name, {})}}
        )

    listed = core.list_namespaced_config_map("default", label_selector=selector)

    assert [item.metadata.name for item in listed.items] == expected


def test_given_objects_when_listing_then_kind_resource_version_and_field_selectors_work(
    core: client.CoreV1Api,
):
    for name in ("x", "y"):
        core.create_namespaced_config_map("default", {"metadata": {"name": name}})

    listed = core.list_namespaced_config_map("default", field_selector="metadata.name!=x")
    everywhere = core.list_config_map_for_all_namespaces(field_selector="metadata.namespace=default")
    with pytest.raises(client.ApiException) as raised:
        core.list_namespaced_config_map("default", field_selector="spec.unknown=1")

    assert listed.kind == "ConfigMapList" and [i.metadata.name for i in listed.items] == ["y"]
    assert int(listed.metadata.resource_version) >= 4
    assert [i.metadata.name for i in everywhere.items] == ["x", "y"]
    assert raised.value.status == 400 and "is not a known field selector" in _status(raised)["message"]


def test_given_many_objects_when_listing_with_a_limit_then_continue_tokens_page_through_them(
    core: client.CoreV1Api,
):
    for i in range(5):
        core.create_namespaced_config_map("default", {"metadata": {"name": f"cm-{i}"}})

    first = core.list_namespaced_config_map("default", limit=2)
    second = core.list_namespaced_config_map("default", limit=2, _continue=first.metadata._continue)

    assert [i.metadata.name for i in first.items] == ["cm-0", "cm-1"]
    assert first.metadata.remaining_item_count == 3
    assert [i.metadata.name for i in second.items] == ["cm-2", "cm-3"]


def test_given_a_deployment_when_spec_or_metadata_change_then_generation_moves_only_for_spec(
    apps: client.AppsV1Api,
):
    created = apps.create_namespaced_deployment("default", deployment("web"))
    labelled = apps.patch_namespaced_deployment("web", "default", {"metadata": {"labels": {"team": "a"}}})
    scaled = apps.patch_namespaced_deployment("web", "default", {"spec": {"replicas": 3}})

    assert (created.metadata.generation, labelled.metadata.generation, scaled.metadata.generation) == (
        1,
        1,
        2,
    )
    assert apps.read_namespaced_deployment("web", "default").status.observed_generation == 2


def test_given_a_status_subresource_then_main_writes_ignore_status_and_status_writes_only_change_status(
    custom: client.CustomObjectsApi, kyma_runtime: RuntimeEmulator
):
    group, version, plural = "operator.kyma-project.io", "v1beta2", "kymas"
    body = {
        "apiVersion": f"{group}/{version}",
        "kind": "Kyma",
        "metadata": {"name": "k"},
        "spec": {"channel": "fast"},
    }
    created = custom.create_namespaced_custom_object(
        group, version, "kyma-system", plural, body | {"status": {"state": "Forged"}}
    )
    main = custom.patch_namespaced_custom_object(
        group, version, "kyma-system", plural, "k", {"status": {"state": "X"}}
    )
    status = custom.patch_namespaced_custom_object_status(
        group,
        version,
        "kyma-system",
        plural,
        "k",
        {"status": {"state": "Ready"}, "spec": {"channel": "ignored"}},
    )

    assert "status" not in created and "status" not in main
    assert status["status"] == {"state": "Ready"} and status["spec"] == {"channel": "fast"}
    assert status["metadata"]["generation"] == 1
    fields = {(m["manager"], m.get("subresource", "")) for m in status["metadata"]["managedFields"]}
    assert ("OpenAPI-Generator", "status") in fields


def test_given_a_missing_namespace_when_creating_into_it_then_404_namespace_not_found(core: client.CoreV1Api):
    with pytest.raises(client.ApiException) as raised:
        core.create_namespaced_service_account("nowhere", {"metadata": {"name": "sa"}})

    assert raised.value.status == 404
    assert _status(raised)["message"] == 'namespaces "nowhere" not found'


def test_given_a_namespace_with_content_when_deleted_then_its_content_goes_with_it(core: client.CoreV1Api):
    created = core.create_namespace({"metadata": {"name": "team-a"}})
    core.create_namespaced_secret("team-a", {"metadata": {"name": "s"}})
    core.create_namespaced_config_map("team-a", {"metadata": {"name": "c"}})

    terminating = json.loads(core.delete_namespace("team-a", _preload_content=False).data)

    assert created.status.phase == "Active" and created.spec.finalizers == ["kubernetes"]
    assert terminating["status"]["phase"] == "Terminating"
    assert core.list_namespaced_secret("team-a").items == []
    with pytest.raises(client.ApiException) as raised:
        core.read_namespace("team-a")
    assert raised.value.status == 404


def test_given_a_system_namespace_when_deleted_then_403_forbidden(core: client.CoreV1Api):
    with pytest.raises(client.ApiException) as raised:
        core.delete_namespace("kube-system")

    assert raised.value.status == 403
    assert (
        _status(raised)["message"]
        == 'namespaces "kube-system" is forbidden: this namespace may not be deleted'
    )


def test_given_an_object_with_a_finalizer_when_deleted_then_it_waits_for_the_finalizer(
    core: client.CoreV1Api,
):
    core.create_namespaced_config_map(
        "default", {"metadata": {"name": "held", "finalizers": ["example.io/hold"]}}
    )

    core.delete_namespaced_config_map("held", "default")
    pending = core.read_namespaced_config_map("held", "default")
    core.patch_namespaced_config_map("held", "default", {"metadata": {"finalizers": None}})

    assert pending.metadata.deletion_timestamp is not None
    with pytest.raises(client.ApiException) as raised:
        core.read_namespaced_config_map("held", "default")
    assert raised.value.status == 404


def test_given_invalid_objects_when_created_then_422_like_a_real_server(
    core: client.CoreV1Api, apps: client.AppsV1Api
):
    broken = deployment("web")
    broken["spec"]["template"]["metadata"]["labels"] = {"app": "other"}
    cases = [
        lambda: core.create_namespaced_config_map("default", {"metadata": {"name": "Not_Valid"}}),
        lambda: core.create_namespaced_secret(
            "default", {"metadata": {"name": "s"}, "data": {"k": "not base64!"}}
        ),
        lambda: apps.create_namespaced_deployment("default", broken),
    ]
    for call in cases:
        with pytest.raises(client.ApiException) as raised:
            call()
        assert raised.value.status == 422 and _status(raised)["reason"] == "Invalid"


def test_given_a_secret_with_string_data_then_it_is_folded_into_data(core: client.CoreV1Api):
    secret = core.create_namespaced_secret(
        "default", {"metadata": {"name": "s"}, "stringData": {"user": "admin"}}
    )

    assert secret.data == {"user": "YWRtaW4="} and secret.string_data is None and secret.type == "Opaque"


def test_given_a_list_resource_version_when_watching_from_it_then_later_changes_stream(
    core: client.CoreV1Api, runtime: RuntimeEmulator
):
    core.create_namespaced_config_map("default", {"metadata": {"name": "before"}})
    listed = core.list_namespaced_config_map("default")
    runtime.create_as_user(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "after", "namespace": "default"}}
    )
    runtime.delete_as_user("configmaps", "before", "default")

    stream = watch.Watch().stream(
        core.list_namespaced_config_map,
        "default",
        resource_version=listed.metadata.resource_version,
        timeout_seconds=1,
    )
    events = [(e["type"], e["object"].metadata.name) for e in stream]

    assert events == [("ADDED", "after"), ("DELETED", "before")]


def test_given_objects_when_watching_without_a_version_then_current_objects_come_first(
    core: client.CoreV1Api, runtime: RuntimeEmulator
):
    core.create_namespaced_config_map("default", {"metadata": {"name": "cm", "labels": {"w": "1"}}})
    watcher = watch.Watch()
    seen = []
    for event in watcher.stream(
        core.list_namespaced_config_map, "default", label_selector="w=1", timeout_seconds=2
    ):
        seen.append((event["type"], event["object"].data))
        if len(seen) == 1:
            runtime.patch_as_user("configmaps", "cm", {"data": {"k": "v"}}, "default")
        else:
            watcher.stop()

    assert seen == [("ADDED", None), ("MODIFIED", {"k": "v"})]


def test_given_a_resource_version_older_than_the_watch_log_then_410_expired(
    core: client.CoreV1Api, runtime: RuntimeEmulator
):
    core.list_namespaced_config_map("default")  # starts the watch log
    for i in range(300):
        runtime.create_as_user(
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"cm-{i}", "namespace": "default"}}
        )

    with pytest.raises(client.ApiException) as raised:
        list(
            watch.Watch().stream(
                core.list_namespaced_config_map, "default", resource_version="3", timeout_seconds=1
            )
        )

    assert raised.value.status == 410 and "Expired" in raised.value.reason
