"""Server-side apply and the other patch types, sent exactly the way the kubernetes client sends them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.dynamic import DynamicClient

from runtime_emulator import RuntimeEmulator
from tests.runtime_emulator.helpers import deployment, kyma

APPLY = "application/apply-patch+yaml"
KYMAS = ("operator.kyma-project.io", "v1beta2", "kyma-system", "kymas")


def _config_map(data: dict[str, str], labels: dict[str, str] | None = None) -> dict:
    metadata = {"name": "cm", "namespace": "default", "labels": labels or {}}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": data}


def _apply_config_map(
    core: client.CoreV1Api, body: dict, manager: str = "kcp", force: bool = False
) -> client.V1ConfigMap:
    return core.patch_namespaced_config_map(
        "cm", "default", body, field_manager=manager, force=force, _content_type=APPLY
    )


def test_given_no_object_when_applying_then_it_is_created_and_owned_by_the_applier(apps: client.AppsV1Api):
    applied = apps.patch_namespaced_deployment(
        "web", "default", deployment("web"), field_manager="kcp", force=True, _content_type=APPLY
    )

    assert applied.metadata.generation == 1 and applied.spec.replicas == 1
    (entry,) = applied.metadata.managed_fields
    assert (entry.manager, entry.operation, entry.api_version) == ("kcp", "Apply", "apps/v1")
    assert "f:replicas" in entry.fields_v1["f:spec"]


def test_given_an_applied_object_when_a_field_is_no_longer_applied_then_it_is_removed(core: client.CoreV1Api):
    _apply_config_map(core, _config_map({"a": "1", "b": "2"}, {"x": "1"}))

    updated = _apply_config_map(core, _config_map({"a": "1"}))

    assert updated.data == {"a": "1"}
    assert not updated.metadata.labels


def test_given_fields_of_other_writers_when_reapplying_then_they_are_kept(
    core: client.CoreV1Api, runtime: RuntimeEmulator
):
    _apply_config_map(core, _config_map({"a": "1"}, {"owner": "kcp"}))
    runtime.patch_as_user("configmaps", "cm", {"metadata": {"labels": {"edited": "yes"}}}, "default")
    _apply_config_map(core, _config_map({"c": "3"}), manager="other")

    updated = _apply_config_map(core, _config_map({"a": "2"}))

    assert updated.data == {"a": "2", "c": "3"}
    assert updated.metadata.labels == {"edited": "yes"}
    managers = {(m.manager, m.operation) for m in updated.metadata.managed_fields}
    assert managers == {("kcp", "Apply"), ("other", "Apply"), ("kubectl-patch", "Update")}


def test_given_a_user_edit_when_applying_without_force_then_409_conflict_names_the_editor(
    core: client.CoreV1Api, runtime: RuntimeEmulator
):
    _apply_config_map(core, _config_map({"a": "1"}))
    runtime.edit_as_user("configmaps", "cm", lambda cm: cm["data"].update(a="edited"), "default")

    with pytest.raises(client.ApiException) as raised:
        _apply_config_map(core, _config_map({"a": "1"}))
    forced = _apply_config_map(core, _config_map({"a": "1"}), force=True)

    status = json.loads(raised.value.body)
    assert raised.value.status == 409 and status["reason"] == "Conflict"
    assert status["message"] == 'Apply failed with 1 conflict: conflict with "kubectl-edit" using v1: .data.a'
    assert forced.data == {"a": "1"}
    assert {m.manager for m in forced.metadata.managed_fields} == {"kcp"}


def test_given_a_keyed_list_when_another_writer_added_an_item_then_force_apply_keeps_it(
    apps: client.AppsV1Api, runtime: RuntimeEmulator
):
    manifest = deployment("web")
    apps.patch_namespaced_deployment("web", "default", manifest, field_manager="kcp", _content_type=APPLY)
    extra = [{"name": "main", "image": "nginx:1.26"}, {"name": "sidecar", "image": "envoy:1"}]
    runtime.patch_as_user(
        "deployments", "web", {"spec": {"template": {"spec": {"containers": extra}}}}, "default"
    )

    applied = apps.patch_namespaced_deployment(
        "web", "default", manifest, field_manager="kcp", force=True, _content_type=APPLY
    )

    # Containers are keyed by name (as on a real server): the sidecar is the other writer's, the
    # image of "main" the apply's again.
    containers = applied.spec.template.spec.containers
    assert [(c.name, c.image) for c in containers] == [("main", "nginx:1.27"), ("sidecar", "envoy:1")]
    assert applied.metadata.generation == 3


def test_given_the_same_manifest_when_applied_again_then_nothing_is_written(core: client.CoreV1Api):
    first = _apply_config_map(core, _config_map({"a": "1"}))

    second = _apply_config_map(core, _config_map({"a": "1"}))

    assert second.metadata.resource_version == first.metadata.resource_version


def test_given_an_apply_without_field_manager_then_it_is_rejected(core: client.CoreV1Api):
    with pytest.raises(client.ApiException) as raised:
        core.patch_namespaced_config_map("cm", "default", _config_map({}), _content_type=APPLY)

    assert raised.value.status == 422
    assert "fieldManager: Required value" in json.loads(raised.value.body)["message"]


def test_given_call_api_with_apply_headers_then_a_custom_resource_is_created_then_updated(
    api: client.ApiClient, kyma_runtime: RuntimeEmulator
):
    path = "/apis/operator.kyma-project.io/v1beta2/namespaces/kyma-system/kymas/k"

    def apply(body: dict) -> dict:
        return api.call_api(
            path,
            "PATCH",
            query_params=[("fieldManager", "kcp"), ("force", True)],
            header_params={"Content-Type": APPLY, "Accept": "application/json"},
            body=body,
            auth_settings=["BearerToken"],
            response_types_map={200: "object", 201: "object"},
            _return_http_data_only=True,
        )

    created = apply(kyma("k", modules=[{"name": "istio"}]))
    updated = apply(kyma("k"))

    assert created["spec"]["modules"] == [{"name": "istio"}]
    assert "modules" not in updated["spec"]
    assert updated["metadata"]["generation"] == 2


def test_given_custom_objects_api_with_apply_content_type_then_status_can_be_applied_too(
    custom: client.CustomObjectsApi, kyma_runtime: RuntimeEmulator
):
    custom.patch_namespaced_custom_object(*KYMAS, "k", kyma("k"), field_manager="kcp", _content_type=APPLY)

    status = custom.patch_namespaced_custom_object_status(
        *KYMAS,
        "k",
        kyma("k") | {"status": {"state": "Ready"}},
        field_manager="kcp-status",
        _content_type=APPLY,
    )

    assert status["status"] == {"state": "Ready"}
    assert {(m["manager"], m.get("subresource")) for m in status["metadata"]["managedFields"]} == {
        ("kcp", None),
        ("kcp-status", "status"),
    }


def test_given_the_dynamic_client_when_server_side_applying_then_it_works(
    api: client.ApiClient, kyma_runtime: RuntimeEmulator, tmp_path: Path
):
    kymas = DynamicClient(api, cache_file=str(tmp_path / "d.json")).resources.get(
        api_version="operator.kyma-project.io/v1beta2", kind="Kyma"
    )

    applied = kymas.server_side_apply(
        body=kyma("k"), namespace="kyma-system", field_manager="kcp", force_conflicts=True
    )

    assert applied.metadata.managedFields[0].manager == "kcp"


def test_given_a_yaml_apply_body_like_kubectl_sends_then_it_is_understood(
    api: client.ApiClient, runtime: RuntimeEmulator
):
    body = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\n  namespace: default\ndata:\n  a: '1'\n"
    url = f"{runtime.url}/api/v1/namespaces/default/configmaps/cm?fieldManager=kubectl"
    headers = {"Content-Type": APPLY, "Authorization": f"Bearer {runtime.token}"}

    response = api.rest_client.pool_manager.request("PATCH", url, body=body, headers=headers)

    assert response.status == 201
    assert runtime.get_object("configmaps", "cm", "default")["data"] == {"a": "1"}


def test_given_a_merge_patch_with_null_then_the_key_is_removed(
    custom: client.CustomObjectsApi, kyma_runtime: RuntimeEmulator
):
    custom.create_namespaced_custom_object(*KYMAS, kyma("k", sync={"enabled": True, "strategy": "secret"}))

    patched = custom.patch_namespaced_custom_object(*KYMAS, "k", {"spec": {"sync": {"strategy": None}}})

    assert patched["spec"]["sync"] == {"enabled": True}


def test_given_a_dict_to_a_typed_patch_then_it_is_a_strategic_merge_by_container_name(apps: client.AppsV1Api):
    apps.create_namespaced_deployment("default", deployment("web"))

    patched = apps.patch_namespaced_deployment(
        "web",
        "default",
        {
            "metadata": {"labels": {"a": "b"}},
            "spec": {"template": {"spec": {"containers": [{"name": "x", "image": "y:1"}]}}},
        },
    )

    assert patched.metadata.labels == {"a": "b"}
    # A new container goes in front of the existing ones (which a merge patch would replace).
    assert [c.name for c in patched.spec.template.spec.containers] == ["x", "main"]


def test_given_a_list_body_then_it_is_a_json_patch_and_failed_tests_are_422(core: client.CoreV1Api):
    core.create_namespaced_config_map("default", {"metadata": {"name": "cm"}, "data": {"a": "1"}})

    patched = core.patch_namespaced_config_map(
        "cm", "default", [{"op": "add", "path": "/data/b", "value": "2"}, {"op": "remove", "path": "/data/a"}]
    )
    with pytest.raises(client.ApiException) as raised:
        core.patch_namespaced_config_map(
            "cm", "default", [{"op": "test", "path": "/data/b", "value": "other"}]
        )

    assert patched.data == {"b": "2"}
    assert raised.value.status == 422


def test_given_force_on_a_non_apply_patch_then_it_is_rejected(core: client.CoreV1Api):
    core.create_namespaced_config_map("default", {"metadata": {"name": "cm"}})

    with pytest.raises(client.ApiException) as raised:
        core.patch_namespaced_config_map("cm", "default", {"data": {"a": "1"}}, force=True)

    assert raised.value.status == 422


def test_given_dry_run_then_the_result_is_computed_but_not_stored(
    core: client.CoreV1Api, runtime: RuntimeEmulator
):
    planned = core.patch_namespaced_config_map(
        "cm", "default", _config_map({"a": "1"}), field_manager="kcp", dry_run="All", _content_type=APPLY
    )

    assert planned.data == {"a": "1"} and planned.metadata.uid
    assert runtime.get_object("configmaps", "cm", "default") is None
