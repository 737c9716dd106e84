"""Emulated runtimes for reconcile tests: one EmulatorHost per test session, runtimes per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from fleet.models import Kyma, Module
from fleet.services import kymas as kyma_services
from kernel.documents.yamlio import dump_yaml
from runtime_emulator import EmulatorHost, RuntimeEmulator, crd_manifest
from watchers.services import watcher_apply

KLM = {
    "namespace": "kcp-system",
    "name": "klm-watcher",
    "manager": "lifecycle-manager",
    "labels_to_watch": {"operator.kyma-project.io/watched-by": "kyma"},
    "resource_to_watch": {"group": "operator.kyma-project.io", "version": "*", "resource": "kymas"},
    "field": "spec",
    "service_info": {"name": "klm-events", "namespace": "kcp-system", "port": 8082},
}


@pytest.fixture(scope="session")
def emulator_host() -> Iterator[EmulatorHost]:
    with EmulatorHost() as host:
        yield host


@pytest.fixture
def runtimes(emulator_host: EmulatorHost) -> Iterator:
    """``runtimes()`` starts an emulated runtime with the module CRDs of the test catalog."""
    started: list[RuntimeEmulator] = []

    def make(**kwargs: object) -> RuntimeEmulator:
        runtime = emulator_host.create(**kwargs)
        runtime.register_crd(crd_manifest("operator.kyma-project.io", "Keda", versions=("v1alpha1",)))
        started.append(runtime)
        return runtime

    yield make
    for runtime in started:
        emulator_host.remove(runtime)


def keda_module() -> Module:
    return Module.objects.get_or_create(
        name="keda",
        defaults={
            "channels": {"regular": "1.0.0", "fast": "1.1.0"},
            "cr_group": "operator.kyma-project.io",
            "cr_version": "v1alpha1",
            "cr_kind": "Keda",
            "cr_plural": "kedas",
            "default_cr": {"spec": {"replicas": 1}},
        },
    )[0]


def klm_watcher() -> None:
    watcher_apply(**KLM)


def connected_kyma(
    runtime: RuntimeEmulator, *, name: str = "k1", modules: list | None = None, **fields: object
) -> Kyma:
    """A Kyma whose kubeconfig points at the emulated runtime."""
    fields = {"runtime_id": f"rt-{name}", "skr_domain": f"{name}.kyma.example.com", **fields}
    kyma, _ = kyma_services.kyma_apply(
        namespace="kcp-system",
        name=name,
        modules=modules if modules is not None else [{"name": "keda"}],
        **fields,
    )
    kyma_services.kyma_set_kubeconfig(kyma=kyma, kubeconfig=dump_yaml([runtime.kubeconfig()]))
    kyma.refresh_from_db()
    return kyma
