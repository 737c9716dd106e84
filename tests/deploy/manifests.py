"""Reading the deploy/ artifacts the way kubectl and kustomize would, without either binary.

``build`` is a small kustomize: resources (files and kustomization directories), ``namespace``,
``images``, ``replicas`` and inline strategic-merge ``patches`` on maps (lists are replaced, as
in a JSON merge patch; our patches only touch maps). That is all our kustomizations use, and
``test_kustomizations_use_only_what_the_test_builder_understands`` keeps it that way.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from tools.docs import environment

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
KUBERNETES = DEPLOY / "kubernetes"
BASE = KUBERNETES / "base"
OVERLAY = KUBERNETES / "overlays" / "example"
ISTIO = DEPLOY / "istio"
DOCKERFILE = DEPLOY / "controlplane" / "Dockerfile"

# The newest Kubernetes whose schemas the pinned kubernetes-validate ships.
KUBERNETES_VERSION = "1.37.0"
SECRET_NAME = "controlplane-secrets"
SECRET_KEYS = {"DJANGO_SECRET_KEY", "CONTROLPLANE_ENCRYPTION_KEYS", "DATABASE_URL", "CELERY_BROKER_URL"}
KUSTOMIZE_KIND = "Kustomization"
CLUSTER_SCOPED = {"Namespace"}
WORKLOAD_KINDS = {"Deployment", "Job"}


def load(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def yaml_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.rglob("*") if p.suffix in (".yaml", ".yml"))


def is_kustomization(doc: dict[str, Any]) -> bool:
    return doc.get("kind") == KUSTOMIZE_KIND


def merge_maps(base: Any, patch: Any) -> Any:
    """Strategic merge as far as maps go: keys merge recursively, anything else is replaced."""
    if isinstance(base, dict) and isinstance(patch, dict):
        merged = dict(base)
        for key, value in patch.items():
            merged[key] = merge_maps(base.get(key), value) if key in base else copy.deepcopy(value)
        return merged
    return copy.deepcopy(patch)


def _image_rewrite(image: str, rules: list[dict[str, Any]]) -> str:
    name, _, tag = image.partition(":")
    for rule in rules:
        if rule["name"] == name:
            return f"{rule.get('newName', name)}:{rule.get('newTag', tag)}"
    return image


def containers(pod_spec: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield from pod_spec.get("initContainers") or []
    yield from pod_spec.get("containers") or []


def pod_spec(doc: dict[str, Any]) -> dict[str, Any]:
    return doc["spec"]["template"]["spec"]


def build(directory: Path) -> list[dict[str, Any]]:
    """The objects ``kubectl apply -k directory`` would send, in resource order."""
    (kustomization,) = load(directory / "kustomization.yaml")
    objects: list[dict[str, Any]] = []
    for entry in kustomization.get("resources", []):
        target = (directory / entry).resolve()
        objects.extend(build(target) if target.is_dir() else load(target))
    objects = copy.deepcopy(objects)
    for obj in objects:
        if kustomization.get("namespace") and obj["kind"] not in CLUSTER_SCOPED:
            obj["metadata"]["namespace"] = kustomization["namespace"]
        if obj["kind"] in WORKLOAD_KINDS:
            for container in containers(pod_spec(obj)):
                container["image"] = _image_rewrite(container["image"], kustomization.get("images", []))
        for rule in kustomization.get("replicas", []):
            if obj["kind"] == "Deployment" and obj["metadata"]["name"] == rule["name"]:
                obj["spec"]["replicas"] = rule["count"]
    for patch in kustomization.get("patches", []):
        body = yaml.safe_load(patch["patch"])
        target = patch["target"]
        matched = [
            o for o in objects if o["kind"] == target["kind"] and o["metadata"]["name"] == target["name"]
        ]
        assert matched, f"{directory}: patch target {target} matches nothing"
        for obj in matched:
            objects[objects.index(obj)] = merge_maps(obj, body)
    return objects


def by_kind_name(objects: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(o["kind"], o["metadata"]["name"]): o for o in objects}


def config_data(objects: dict[tuple[str, str], dict[str, Any]]) -> dict[str, str]:
    """The shared ConfigMap's settings."""
    return objects[("ConfigMap", "controlplane-config")]["data"]


def main_container(objects: dict[tuple[str, str], dict[str, Any]], deployment: str) -> dict[str, Any]:
    return pod_spec(objects[("Deployment", deployment)])["containers"][0]


def documented_variables() -> set[str]:
    """The variables the settings reference describes (generated from the code: tools/docs)."""
    return environment.documented_names(ROOT)


def references(value: str) -> list[str]:
    """``$(NAME)`` references that the kubelet expands in env values, command and args."""
    return re.findall(r"(?<!\$)\$\(([A-Za-z_][A-Za-z0-9_]*)\)", value)
