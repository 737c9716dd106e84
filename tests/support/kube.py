"""Real runtimes for the ``kube`` tier: one etcd per test session, a fresh kube-apiserver (with its
controller manager and the node stand-in of :mod:`envtest.node`) per test, as an
:class:`envtest.runtime.Runtime`."""

from __future__ import annotations

import itertools
import subprocess
from collections.abc import Iterator
from typing import Any

import kubernetes
import pytest

from envtest.binaries import BUILD_SCRIPT
from envtest.cluster import Cluster
from envtest.node import Node
from envtest.runtime import CONTROL_PLANE_USER, Runtime, wait_for
from fleet.models import Kyma
from fleet.services import kymas as kyma_services
from kernel.documents.yamlio import dump_yaml
from runtime_emulator import crd_manifest

__all__ = ["CONTROL_PLANE_USER", "Runtime", "connect_kyma", "kube_cluster", "real_runtime", "wait_for"]
_names = itertools.count(1)


@pytest.fixture(scope="session")
def kube_cluster(tmp_path_factory) -> Iterator[Cluster]:
    """etcd for the session; the binaries are built first when missing (``make kube``)."""
    built = subprocess.run(["bash", str(BUILD_SCRIPT)], capture_output=True, text=True, check=False)
    if built.returncode != 0:
        pytest.fail(f"the kube tier needs the Kubernetes binaries: {built.stderr.strip()}", pytrace=False)
    with Cluster(workdir=tmp_path_factory.mktemp("envtest")) as cluster:
        yield cluster


@pytest.fixture
def real_runtime(kube_cluster: Cluster) -> Iterator[Runtime]:
    """A fresh real runtime with the test catalog's module CRD (keda)."""
    server = kube_cluster.runtime(f"rt{next(_names)}")
    node = None
    admin = kubernetes.config.new_client_from_config_dict(server.admin_kubeconfig())
    try:
        node = Node(server)
        runtime = Runtime(server, node, admin)
        runtime.register_crd(crd_manifest("operator.kyma-project.io", "Keda", versions=("v1alpha1",)))
        yield runtime
    finally:
        if node is not None:
            node.close()
        admin.close()
        kube_cluster.remove(server)


def connect_kyma(runtime: Runtime, *, name: str = "k1", modules: list | None = None, **fields: Any) -> Kyma:
    """A Kyma whose kubeconfig is the control plane's least-privilege identity in ``runtime``."""
    fields = {"runtime_id": f"rt-{name}", "skr_domain": f"{name}.kyma.example.com", **fields}
    kyma, _ = kyma_services.kyma_apply(
        namespace="kcp-system",
        name=name,
        modules=modules if modules is not None else [{"name": "keda"}],
        **fields,
    )
    kubeconfig = runtime.control_plane_kubeconfig()
    kyma_services.kyma_set_kubeconfig(kyma=kyma, kubeconfig=dump_yaml([kubeconfig]))
    kyma.refresh_from_db()
    return kyma
