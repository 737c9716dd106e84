"""The emulator host: many runtimes in one process, each isolated, driven from synchronous code."""

from __future__ import annotations

import asyncio
import socket

import pytest
from kubernetes import client, config

from runtime_emulator import EmulatorHost
from tests.runtime_emulator.helpers import KYMA_CRD, api_client


def test_given_many_runtimes_created_at_once_then_each_has_its_own_port_token_and_objects(host: EmulatorHost):
    runtimes = host.create_many(20, prefix="fleet", namespaces=("default", "kyma-system"), crds=[KYMA_CRD])
    try:
        first, second = runtimes[0], runtimes[1]
        with api_client(first) as api_a, api_client(second) as api_b:
            client.CoreV1Api(api_a).create_namespaced_config_map(
                "kyma-system", {"metadata": {"name": "only-a"}}
            )
            seen_by_b = client.CoreV1Api(api_b).list_namespaced_config_map("kyma-system").items
            kymas = client.CustomObjectsApi(api_b).list_namespaced_custom_object(
                "operator.kyma-project.io", "v1beta2", "kyma-system", "kymas"
            )
        crd_name = KYMA_CRD["metadata"]["name"]
        specs = [r.get_object("customresourcedefinitions", crd_name)["spec"] for r in (first, second)]

        assert len({r.port for r in runtimes}) == len({r.token for r in runtimes}) == 20
        assert host[first.name] is first and len(host) >= 20
        assert all(r.name.startswith("fleet-") for r in runtimes)
        assert seen_by_b == [] and kymas["items"] == []
        assert specs[0] == specs[1] == KYMA_CRD["spec"]
    finally:
        for runtime in runtimes:
            host.remove(runtime)


def test_given_a_runtimes_token_when_used_on_another_runtime_then_it_is_rejected(host: EmulatorHost):
    one, other = host.create_many(2)
    kubeconfig = one.kubeconfig()
    kubeconfig["users"][0]["user"]["token"] = other.token
    try:
        with (
            config.new_client_from_config_dict(kubeconfig) as api,
            pytest.raises(client.ApiException) as raised,
        ):
            client.CoreV1Api(api).list_namespace()
        assert raised.value.status == 401
    finally:
        host.remove(one)
        host.remove(other)


def test_given_a_removed_runtime_then_its_port_refuses_connections(host: EmulatorHost):
    runtime = host.create()
    port = runtime.port

    host.remove(runtime)

    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()


def test_given_code_on_the_host_loop_when_it_calls_run_then_it_is_told_to_await_instead(host: EmulatorHost):
    async def nested() -> None:
        host.run(asyncio.sleep(0))

    with pytest.raises(RuntimeError, match="await instead"):
        host.run(nested())
