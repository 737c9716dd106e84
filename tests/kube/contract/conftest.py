"""Fixtures of the contract suite: ``backend`` is the API server a case runs against, once the real
one (``kube`` tier) and once the emulator, each started once per session and shared by the cases;
``ns`` is a fresh namespace per case, so cases never see each other's objects."""

from __future__ import annotations

import re
from collections.abc import Iterator

import kubernetes
import pytest

from pki.crypto import KeyPair
from tests.kube.contract.backends import Backend, EmulatorBackend, RealBackend
from tests.kube.contract.resources import WIDGETS
from tests.kube.contract.webhook import webhook_ca

BACKENDS = ["emulator", pytest.param("real", marks=pytest.mark.kube)]


@pytest.fixture(scope="session", params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    if request.param == "real":
        chosen: Backend = RealBackend(request.getfixturevalue("kube_cluster"))
    else:
        chosen = EmulatorBackend()
    try:
        yield chosen
    finally:
        chosen.close()


@pytest.fixture
def ns(backend: Backend, request: pytest.FixtureRequest) -> str:
    """A new namespace for this case (left behind: the server goes at the end of the session)."""
    prefix = re.sub(r"[^a-z0-9]+", "-", request.node.originalname.removeprefix("test_").lower())
    return backend.namespace(prefix)


@pytest.fixture(scope="session")
def widgets_served(backend: Backend) -> None:
    """The suite's own custom resource kind (``resources.WIDGETS``) is served."""
    backend.register_crd(WIDGETS)


@pytest.fixture
def core(backend: Backend) -> kubernetes.client.CoreV1Api:
    return kubernetes.client.CoreV1Api(backend.api)


@pytest.fixture
def apps(backend: Backend) -> kubernetes.client.AppsV1Api:
    return kubernetes.client.AppsV1Api(backend.api)


@pytest.fixture
def custom(backend: Backend) -> kubernetes.client.CustomObjectsApi:
    return kubernetes.client.CustomObjectsApi(backend.api)


@pytest.fixture(scope="session")
def ca() -> KeyPair:
    """The CA of the suite's webhook servers (their caBundle)."""
    return webhook_ca()
