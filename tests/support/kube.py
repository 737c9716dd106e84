"""Real runtimes for the ``kube`` tier: one etcd per test session, a fresh kube-apiserver (with its
controller manager and the node stand-in of :mod:`envtest.node`) per test, as an
:class:`envtest.runtime.Runtime`."""

from __future__ import annotations

import itertools
import queue
import subprocess
import threading
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

__all__ = [
    "CONTROL_PLANE_USER",
    "Runtime",
    "RuntimePool",
    "connect_kyma",
    "kube_cluster",
    "real_runtime",
    "runtime_pool",
    "wait_for",
]
_names = itertools.count(1)


KEDA_CRD = crd_manifest("operator.kyma-project.io", "Keda", versions=("v1alpha1",))


class RuntimePool:
    """Keeps one runtime started ahead: a test takes it ready (its server, controller manager and
    node up, the test catalog's keda CRD established, the control plane's access granted), and the
    next one starts while the test runs. The starting happens on one thread that lives as long as
    the session, so the processes it starts do too (they end with the thread that started them)."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self._ready: queue.Queue[Runtime | BaseException] = queue.Queue(maxsize=1)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._fill, name="envtest-pool", daemon=True)
        self._thread.start()

    def _start(self) -> Runtime:
        server = self.cluster.runtime(f"rt{next(_names)}")
        admin = kubernetes.config.new_client_from_config_dict(server.admin_kubeconfig())
        runtime = Runtime(server, Node(server), admin)
        runtime.register_crd(KEDA_CRD)
        runtime.grant_control_plane_access()
        return runtime

    def _fill(self) -> None:
        while not self._stop.is_set():
            try:
                item: Runtime | BaseException = self._start()
            except Exception as exc:  # handed to the test that takes it
                item = exc
            while not self._stop.is_set():
                try:
                    self._ready.put(item, timeout=0.2)
                    break
                except queue.Full:
                    continue
            else:
                if isinstance(item, Runtime):
                    self.release(item)

    def take(self) -> Runtime:
        item = self._ready.get(timeout=300)
        if isinstance(item, BaseException):
            raise item
        return item

    def release(self, runtime: Runtime) -> None:
        runtime.close()
        self.cluster.remove(runtime.server)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(60)
        while not self._ready.empty():
            item = self._ready.get_nowait()
            if isinstance(item, Runtime):
                self.release(item)


@pytest.fixture(scope="session")
def kube_cluster() -> Iterator[Cluster]:
    """etcd for the session; the binaries are built first when missing (``make kube``)."""
    built = subprocess.run(["bash", str(BUILD_SCRIPT)], capture_output=True, text=True, check=False)
    if built.returncode != 0:
        pytest.fail(f"the kube tier needs the Kubernetes binaries: {built.stderr.strip()}", pytrace=False)
    # A directory of its own (not pytest's basetemp, which a fourth concurrent pytest session on
    # the machine prunes): etcd's data and each server's files, removed at the end.
    with Cluster() as cluster:
        yield cluster


@pytest.fixture(scope="session")
def runtime_pool(kube_cluster: Cluster) -> Iterator[RuntimePool]:
    pool = RuntimePool(kube_cluster)
    yield pool
    pool.close()


@pytest.fixture
def real_runtime(runtime_pool: RuntimePool) -> Iterator[Runtime]:
    """A fresh real runtime with the test catalog's module CRD (keda), used by this test alone."""
    runtime = runtime_pool.take()
    try:
        yield runtime
    finally:
        runtime_pool.release(runtime)


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
