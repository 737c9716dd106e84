"""The kube tier: every test here runs against real kube-apiservers (``envtest``), all of them in
one pytest-xdist worker (``--dist loadgroup``), which starts one etcd for the session."""

from pathlib import Path

import pytest

from tests.support.kube import kube_cluster, real_runtime, runtime_pool  # noqa: F401 - fixtures

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(pytest.mark.kube)
            item.add_marker(pytest.mark.xdist_group("kube"))
