"""deploy/kubernetes layout: kustomizations that kubectl -k can build, without secrets in them."""

from __future__ import annotations

import pytest
from jsonschema import Draft202012Validator

from tests.deploy.manifests import (
    BASE,
    KUBERNETES,
    OVERLAY,
    SECRET_KEYS,
    SECRET_NAME,
    build,
    by_kind_name,
    config_data,
    load,
    main_container,
)

KUSTOMIZATION_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["apiVersion", "kind", "resources"],
    "properties": {
        "apiVersion": {"const": "kustomize.config.k8s.io/v1beta1"},
        "kind": {"const": "Kustomization"},
        "namespace": {"type": "string"},
        "resources": {"type": "array", "items": {"type": "string"}, "minItems": 1},
        "images": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["name"],
                "properties": {
                    "name": {"type": "string"},
                    "newName": {"type": "string"},
                    "newTag": {"type": "string"},
                },
            },
        },
        "replicas": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["name", "count"],
                "properties": {"name": {"type": "string"}, "count": {"type": "integer", "minimum": 0}},
            },
        },
        "patches": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["target", "patch"],
                "properties": {"target": {"type": "object"}, "patch": {"type": "string"}},
            },
        },
    },
}


@pytest.mark.parametrize("directory", [BASE, OVERLAY], ids=["base", "overlay"])
def test_kustomizations_use_only_what_the_test_builder_understands(directory):
    (kustomization,) = load(directory / "kustomization.yaml")
    errors = [e.message for e in Draft202012Validator(KUSTOMIZATION_SCHEMA).iter_errors(kustomization)]
    assert errors == []
    for entry in kustomization["resources"]:
        assert (directory / entry).exists(), f"{directory}: resource {entry} does not exist"


def test_base_kustomization_lists_every_manifest_of_the_base():
    (kustomization,) = load(BASE / "kustomization.yaml")
    on_disk = {p.name for p in BASE.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kustomization["resources"]) == on_disk


def test_no_secret_value_is_part_of_any_kustomization(built):
    assert not [key for key in built if key[0] == "Secret"]
    (example,) = load(KUBERNETES / "secret.example.yaml")
    assert set(example["stringData"]) == SECRET_KEYS
    assert example["metadata"]["name"] == SECRET_NAME


def test_overlay_changes_image_replicas_and_site_settings_but_not_the_base_shape():
    base, overlay = by_kind_name(build(BASE)), by_kind_name(build(OVERLAY))
    assert base.keys() == overlay.keys()
    assert main_container(overlay, "controlplane-web")["image"].startswith("registry.example.com/")
    assert overlay[("Deployment", "controlplane-beat")]["spec"]["replicas"] == 2
    assert config_data(overlay)["WATCHER_KCP_ADDR"] == "listener.kcp.example.org:443"
    assert config_data(overlay).keys() == config_data(base).keys()
