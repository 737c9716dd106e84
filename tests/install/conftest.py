"""The install tier: deploy/ installed on a real kube-apiserver as docs/operators say, once per test
module (``installed``, gone before the next module installs again), and used by every test of the
module in order, on one pytest-xdist worker.

Sharing is honest where a test leaves the installation as an operator would find it after that
action: the tests run in the order of an operator's day (install, register runtimes, events,
disruptions, a rolling update, a switch to the direct-mode listener), each asserting on what it did
through the installed control plane; ``-p no:randomly`` keeps that order.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from envtest.install import Installation, Release, WebSession, release_tree, wait_for

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(pytest.mark.install)
            item.add_marker(pytest.mark.xdist_group("install"))


def redis_database() -> int:
    """The installation's own Redis database: the one after those the suite's workers use
    (``CELERY_BROKER_URL``'s N and N+1), 15 without one."""
    url = os.environ.get("CELERY_BROKER_URL", "")
    if url.startswith("redis://") and url.rsplit("/", 1)[-1].isdigit():
        return (int(url.rsplit("/", 1)[-1]) + 2) % 16
    return 15


PREVIOUS = yaml.safe_load((ROOT / "deploy" / "previous-release.yaml").read_text())["commit"]


@pytest.fixture(scope="module")
def installed() -> Iterator[Installation]:
    """The previous release (deploy/previous-release.yaml), installed by the documented steps with
    its own manifests and images: what the tests upgrade, then use (a fresh install of this tree is
    bench/lifecycle.py's, whose smoke run is part of the suite)."""
    workdir = Path(tempfile.mkdtemp(prefix="install-"))
    release = Release(release_tree(PREVIOUS), "previous")
    try:
        with Installation(workdir, release, redis_db=redis_database(), old_release=True) as installation:
            yield installation
    finally:
        if not os.environ.get("INSTALL_KEEP_WORKDIR"):  # set it to look at the pods' logs afterwards
            shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="module")
def web(installed: Installation) -> WebSession:
    """The administrator, logged in with the password of the Secret ``controlplane-admin``."""
    return installed.session()


@pytest.fixture(scope="module")
def registered(installed: Installation, web: WebSession) -> Installation:
    """Three runtimes registered through the API, Ready."""
    installed.register_runtimes(web)

    def ready() -> bool:
        found = web.get("/api/v1/kymas/")["results"]
        return len(found) == 3 and all((k.get("status") or {}).get("state") == "Ready" for k in found)

    wait_for(ready, timeout=600, what="the three Kymas Ready")
    return installed
