"""Discovery through the kubernetes client: /version, /api, /apis, resource lists, CRDs at runtime."""

from __future__ import annotations

from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.dynamic import DynamicClient

from runtime_emulator import RuntimeEmulator, crd_manifest


def _get(api: client.ApiClient, path: str) -> dict:
    return api.call_api(
        path,
        "GET",
        auth_settings=["BearerToken"],
        response_types_map={200: "object"},
        _return_http_data_only=True,
    )


def test_given_a_runtime_when_asking_version_and_core_then_it_answers_like_a_real_server(
    api: client.ApiClient,
):
    version = client.VersionApi(api).get_code()
    core = client.CoreApi(api).get_api_versions()

    assert version.git_version.startswith("v1.") and version.major == "1"
    assert core.versions == ["v1"]


def test_given_builtins_when_listing_groups_then_every_builtin_group_is_served(api: client.ApiClient):
    groups = {g.name: g for g in client.ApisApi(api).get_api_versions().groups}

    assert {
        "apps",
        "admissionregistration.k8s.io",
        "apiextensions.k8s.io",
        "rbac.authorization.k8s.io",
        "networking.k8s.io",
    } <= set(groups)
    assert groups["apps"].preferred_version.group_version == "apps/v1"


@pytest.mark.parametrize(
    ("path", "name", "kind", "namespaced", "has_status"),
    [
        ("/api/v1", "namespaces", "Namespace", False, True),
        ("/api/v1", "secrets", "Secret", True, False),
        ("/api/v1", "pods", "Pod", True, True),
        ("/apis/apps/v1", "deployments", "Deployment", True, True),
        (
            "/apis/apiextensions.k8s.io/v1",
            "customresourcedefinitions",
            "CustomResourceDefinition",
            False,
            True,
        ),
        (
            "/apis/admissionregistration.k8s.io/v1",
            "validatingwebhookconfigurations",
            "ValidatingWebhookConfiguration",
            False,
            False,
        ),
        ("/apis/rbac.authorization.k8s.io/v1", "clusterrolebindings", "ClusterRoleBinding", False, False),
        ("/apis/networking.k8s.io/v1", "networkpolicies", "NetworkPolicy", True, False),
    ],
)
def test_given_a_builtin_when_reading_its_resource_list_then_kind_scope_verbs_and_status_are_right(
    api: client.ApiClient, path: str, name: str, kind: str, namespaced: bool, has_status: bool
):
    resources = {r["name"]: r for r in _get(api, path)["resources"]}

    assert resources[name]["kind"] == kind
    assert resources[name]["namespaced"] is namespaced
    assert {"get", "list", "watch", "create", "update", "patch", "delete"} <= set(resources[name]["verbs"])
    assert (f"{name}/status" in resources) is has_status


def test_given_a_crd_created_through_the_api_when_discovering_then_every_served_version_is_usable(
    api: client.ApiClient, runtime: RuntimeEmulator
):
    crd = crd_manifest(
        "example.io", "Widget", versions=("v1", "v1alpha1"), namespaced=False, short_names=("wd",)
    )
    client.ApiextensionsV1Api(api).create_custom_resource_definition(crd)

    group = _get(api, "/apis/example.io")
    resources = {r["name"]: r for r in _get(api, "/apis/example.io/v1alpha1")["resources"]}
    stored = client.ApiextensionsV1Api(api).read_custom_resource_definition("widgets.example.io")

    assert group["preferredVersion"]["version"] == "v1"
    assert [v["version"] for v in group["versions"]] == ["v1", "v1alpha1"]
    assert resources["widgets"] | {"verbs": None} == {
        "name": "widgets",
        "singularName": "widget",
        "namespaced": False,
        "kind": "Widget",
        "verbs": None,
        "shortNames": ["wd"],
    }
    assert "widgets/status" in resources
    assert {c.type: c.status for c in stored.status.conditions}["Established"] == "True"
    created = client.CustomObjectsApi(api).create_cluster_custom_object(
        "example.io",
        "v1alpha1",
        "widgets",
        {"apiVersion": "example.io/v1alpha1", "kind": "Widget", "metadata": {"name": "w"}},
    )
    assert created["metadata"]["generation"] == 1
    assert runtime.get_object("widgets.example.io", "w")["apiVersion"] == "example.io/v1alpha1"


def test_given_a_crd_registered_in_python_when_using_the_dynamic_client_then_it_is_discovered(
    api: client.ApiClient, kyma_runtime: RuntimeEmulator, tmp_path: Path
):
    dynamic = DynamicClient(api, cache_file=str(tmp_path / "discovery.json"))

    kymas = dynamic.resources.get(api_version="operator.kyma-project.io/v1beta2", kind="Kyma")
    deployments = dynamic.resources.get(api_version="apps/v1", kind="Deployment")

    assert kymas.namespaced and kymas.name == "kymas" and "status" in kymas.subresources
    assert deployments.name == "deployments"
    assert kymas.get(namespace="kyma-system").items == []


def test_given_a_crd_when_it_is_deleted_then_its_resources_and_objects_disappear(
    custom: client.CustomObjectsApi, api: client.ApiClient, kyma_runtime: RuntimeEmulator
):
    custom.create_namespaced_custom_object(
        "operator.kyma-project.io",
        "v1beta2",
        "kyma-system",
        "kymas",
        {"apiVersion": "operator.kyma-project.io/v1beta2", "kind": "Kyma", "metadata": {"name": "k"}},
    )

    client.ApiextensionsV1Api(api).delete_custom_resource_definition("kymas.operator.kyma-project.io")

    with pytest.raises(client.ApiException) as listing:
        custom.list_namespaced_custom_object("operator.kyma-project.io", "v1beta2", "kyma-system", "kymas")
    assert listing.value.status == 404
    assert (
        kyma_runtime.list_objects("v1/namespaces")
        and kyma_runtime.store.objects("kymas.operator.kyma-project.io") == []
    )


@pytest.mark.parametrize("path", ["/api/v1/widgets", "/api/v1/secrets/not-namespaced", "/api/v2"])
def test_given_an_unknown_resource_when_requested_then_a_status_404_comes_back(
    api: client.ApiClient, path: str
):
    with pytest.raises(client.ApiException) as raised:
        _get(api, path)

    assert raised.value.status == 404
    assert '"kind": "Status"' in raised.value.body and '"reason": "NotFound"' in raised.value.body


@pytest.mark.parametrize("path", ["/apis/nope.io/v1/things", "/apis/nope.io"])
def test_given_a_group_no_one_serves_when_requested_then_a_plain_404_comes_back(
    api: client.ApiClient, path: str
):
    with pytest.raises(client.ApiException) as raised:
        _get(api, path)

    assert raised.value.status == 404
    assert raised.value.body == "404 page not found\n"
