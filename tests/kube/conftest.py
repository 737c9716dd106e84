"""The kube tier: every test here runs against real kube-apiservers (``envtest``), all of them in
one pytest-xdist worker (``--dist loadgroup``), which starts one etcd for the session.

The contract suite (``contract/``) is the exception: each of its cases runs against both a real
API server and the emulator, and only the real variant (marked ``kube`` by its parameter) belongs
to the tier; the emulator variant runs wherever the tests run, ``-m "not kube"`` included.
"""

from pathlib import Path

import pytest

from tests.support.kube import kube_cluster, real_runtime, runtime_pool  # noqa: F401 - fixtures

HERE = Path(__file__).resolve().parent
CONTRACT = HERE / "contract"


# tryfirst: xdist's own hook turns the xdist_group marks into groups (--dist loadgroup); the marks
# must be there before it runs, or the tier spreads over both workers, each with its own etcd.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE not in item.path.parents:
            continue
        if CONTRACT in item.path.parents and item.get_closest_marker("kube") is None:
            continue  # a contract case's emulator variant
        item.add_marker(pytest.mark.kube)
        item.add_marker(pytest.mark.xdist_group("kube"))
