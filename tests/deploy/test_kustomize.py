"""deploy/kubernetes layout: kustomizations that kubectl -k can build, without secrets in them."""

from __future__ import annotations

import pytest

from tests.deploy.manifests import (
    BASE,
    COMPONENTS,
    KUBERNETES,
    OVERLAY,
    OVERLAY_DIRECT,
    SECRET_KEYS,
    SECRET_NAME,
    build,
    by_kind_name,
    config_data,
    load,
    main_container,
)

KUSTOMIZATIONS = [BASE, OVERLAY, OVERLAY_DIRECT, *sorted(p for p in COMPONENTS.iterdir() if p.is_dir())]


@pytest.mark.parametrize("directory", KUSTOMIZATIONS, ids=lambda d: str(d.relative_to(KUBERNETES)))
def test_every_kustomization_lists_files_that_exist(directory):
    (kustomization,) = load(directory / "kustomization.yaml")
    for entry in [*kustomization.get("resources", []), *kustomization.get("components", [])]:
        assert (directory / entry).exists(), f"{directory}: {entry} does not exist"


@pytest.mark.parametrize("directory", [OVERLAY, OVERLAY_DIRECT], ids=["example", "example-direct"])
def test_an_overlay_builds_with_kubectl_kustomize(directory):
    objects = by_kind_name(build(directory))
    assert ("Deployment", "controlplane-listener") in objects
    assert ("Ingress", "controlplane-web") in objects


def test_base_kustomization_lists_every_manifest_of_the_base():
    (kustomization,) = load(BASE / "kustomization.yaml")
    on_disk = {p.name for p in BASE.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kustomization["resources"]) == on_disk


def test_no_secret_value_is_part_of_any_kustomization(built):
    assert not [key for key in built if key[0] == "Secret"]
    example, admin = load(KUBERNETES / "secret.example.yaml")
    assert set(example["stringData"]) == SECRET_KEYS
    assert example["metadata"]["name"] == SECRET_NAME
    assert (admin["metadata"]["name"], set(admin["stringData"])) == (
        "controlplane-admin",
        {"username", "password"},
    )


@pytest.mark.parametrize("directory", [OVERLAY, OVERLAY_DIRECT], ids=["example", "example-direct"])
def test_overlay_changes_image_replicas_and_site_settings_and_only_adds_its_components(directory):
    base, overlay = by_kind_name(build(BASE)), by_kind_name(build(directory))
    added = {("Ingress", "controlplane-web")}
    if directory == OVERLAY:
        added |= {
            ("ServiceAccount", "controlplane-worker"),
            ("Role", "controlplane-gateway-secret"),
            ("RoleBinding", "controlplane-gateway-secret"),
        }
    assert overlay.keys() - base.keys() == added
    assert base.keys() <= overlay.keys()
    assert main_container(overlay, "controlplane-web")["image"].startswith("registry.example.com/")
    assert overlay[("Deployment", "controlplane-beat")]["spec"]["replicas"] == 2
    assert config_data(overlay)["WATCHER_KCP_ADDR"] == "listener.kcp.example.org:443"
    extra = {"GATEWAY_SECRET_SYNC"} if directory == OVERLAY else set()
    assert config_data(overlay).keys() == config_data(base).keys() | extra
