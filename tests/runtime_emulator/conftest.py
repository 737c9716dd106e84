"""Fixtures: one emulator host per session, a fresh runtime (and kubernetes clients) per test."""

from __future__ import annotations

import datetime as dt
import itertools
from collections.abc import Iterator

import pytest
from kubernetes import client

from pki.crypto import KeyPair, create_ca
from runtime_emulator import EmulatorHost, RuntimeEmulator
from tests.runtime_emulator.helpers import KYMA_CRD, WEBHOOK_HOST, WebhookServer, api_client, issue

_names = itertools.count(1)


@pytest.fixture(scope="session")
def host() -> Iterator[EmulatorHost]:
    with EmulatorHost() as emulator_host:
        yield emulator_host


@pytest.fixture
def runtime(host: EmulatorHost) -> Iterator[RuntimeEmulator]:
    emulator = host.create(f"test-runtime-{next(_names)}")
    yield emulator
    host.remove(emulator)


@pytest.fixture
def api(runtime: RuntimeEmulator) -> Iterator[client.ApiClient]:
    api = api_client(runtime)
    yield api
    api.close()


@pytest.fixture
def core(api: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api)


@pytest.fixture
def apps(api: client.ApiClient) -> client.AppsV1Api:
    return client.AppsV1Api(api)


@pytest.fixture
def custom(api: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api)


@pytest.fixture
def kyma_runtime(runtime: RuntimeEmulator) -> RuntimeEmulator:
    """A runtime with the Kyma CRD and the kyma-system namespace."""
    runtime.register_crd(KYMA_CRD)
    runtime.create_as_user({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kyma-system"}})
    return runtime


@pytest.fixture(scope="session")
def ca() -> KeyPair:
    return create_ca(
        common_name="emulator-test-ca", now=dt.datetime.now(dt.UTC), validity=dt.timedelta(days=1)
    )


@pytest.fixture(scope="session")
def webhook_cert(ca: KeyPair) -> KeyPair:
    return issue(ca, WEBHOOK_HOST)


@pytest.fixture
def webhook(webhook_cert: KeyPair, kyma_runtime: RuntimeEmulator) -> Iterator[WebhookServer]:
    """A running webhook server, reachable from ``kyma_runtime`` as service kyma-system/skr-webhook."""
    server = WebhookServer(webhook_cert)
    server.start()
    kyma_runtime.service_endpoints["kyma-system", "skr-webhook"] = ("127.0.0.1", server.port)
    yield server
    server.stop()
