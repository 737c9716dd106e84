"""Serving: TLS and tokens, kubeconfigs, reachability and injected faults, request accounting."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import urllib3
import yaml
from kubernetes import client, config

from pki.crypto import KeyPair, create_ca
from runtime_emulator import EmulatorHost, RuntimeEmulator, ServerTLS
from tests.runtime_emulator.helpers import deployment, issue


@pytest.fixture
def tls_runtime(host: EmulatorHost, ca: KeyPair) -> Iterator[RuntimeEmulator]:
    pair = issue(ca, "localhost")
    emulator = host.create(
        "tls-runtime", tls=ServerTLS(pair.certificate_pem, pair.private_key_pem, ca.certificate_pem)
    )
    yield emulator
    host.remove(emulator)


def test_given_an_https_runtime_when_the_client_trusts_its_ca_then_requests_succeed(
    tls_runtime: RuntimeEmulator,
):
    kubeconfig = tls_runtime.kubeconfig()

    with config.new_client_from_config_dict(kubeconfig) as api_client:
        namespaces = client.CoreV1Api(api_client).list_namespace()

    assert kubeconfig["clusters"][0]["cluster"]["server"].startswith("https://localhost:")
    assert "certificate-authority-data" in kubeconfig["clusters"][0]["cluster"]
    assert [ns.metadata.name for ns in namespaces.items] == ["default", "kube-system"]


def test_given_an_https_runtime_when_the_client_trusts_another_ca_then_tls_fails(
    tls_runtime: RuntimeEmulator,
):
    import base64
    import datetime as dt

    other = create_ca(common_name="other", now=dt.datetime.now(dt.UTC), validity=dt.timedelta(days=1))
    kubeconfig = tls_runtime.kubeconfig()
    kubeconfig["clusters"][0]["cluster"]["certificate-authority-data"] = base64.b64encode(
        other.certificate_pem
    ).decode()

    with (
        config.new_client_from_config_dict(kubeconfig) as api_client,
        pytest.raises(urllib3.exceptions.MaxRetryError) as raised,
    ):
        client.CoreV1Api(api_client).list_namespace()

    assert "CERTIFICATE_VERIFY_FAILED" in str(raised.value)


def test_given_a_wrong_or_missing_token_then_401_unauthorized(runtime: RuntimeEmulator):
    kubeconfig = runtime.kubeconfig()
    kubeconfig["users"][0]["user"]["token"] = "wrong"

    with (
        config.new_client_from_config_dict(kubeconfig) as api_client,
        pytest.raises(client.ApiException) as raised,
    ):
        client.CoreV1Api(api_client).list_namespace()

    assert raised.value.status == 401 and '"reason": "Unauthorized"' in raised.value.body


def test_given_a_kubeconfig_yaml_then_the_client_loads_it(runtime: RuntimeEmulator, tmp_path):
    path = tmp_path / "kubeconfig"
    path.write_text(runtime.kubeconfig_yaml())

    with config.new_client_from_config(str(path)) as api_client:
        version = client.VersionApi(api_client).get_code()

    assert yaml.safe_load(path.read_text())["current-context"] == runtime.name
    assert version.major == "1"


def test_given_an_unreachable_runtime_then_connections_are_refused_until_it_is_back_on_the_same_port(
    runtime: RuntimeEmulator, core: client.CoreV1Api
):
    core.list_namespace()  # leaves a kept-alive connection in the pool
    port = runtime.port

    runtime.set_reachable(False)
    unreachable = not runtime.reachable
    with pytest.raises(urllib3.exceptions.MaxRetryError) as raised:
        core.list_namespace()
    runtime.set_reachable(True)

    assert unreachable and runtime.reachable

    assert "Connection refused" in str(raised.value) or "ConnectionRefused" in str(raised.value)
    assert runtime.port == port
    assert [ns.metadata.name for ns in core.list_namespace().items] == ["default", "kube-system"]


@pytest.mark.parametrize(("status", "reason"), [(500, "InternalError"), (503, "ServiceUnavailable")])
def test_given_injected_errors_for_n_requests_then_exactly_those_fail(
    runtime: RuntimeEmulator, core: client.CoreV1Api, status: int, reason: str
):
    runtime.faults.fail_requests(status, count=2)

    failures = []
    for _ in range(2):
        with pytest.raises(client.ApiException) as raised:
            core.list_namespace()
        failures.append(raised.value)
    recovered = core.list_namespace()

    assert [(f.status, f'"reason": "{reason}"' in f.body) for f in failures] == [(status, True)] * 2
    assert recovered.items


def test_given_429_with_retry_after_then_the_client_waits_and_retries_like_against_a_real_server(
    runtime: RuntimeEmulator, core: client.CoreV1Api
):
    runtime.faults.fail_requests(429, count=1, retry_after=1)
    runtime.counts.reset()

    started = time.monotonic()
    namespaces = core.list_namespace()

    assert namespaces.items and time.monotonic() - started >= 1
    assert runtime.counts.count("list", "namespaces") == 2


def test_given_injected_errors_for_a_while_then_they_stop_by_themselves(
    runtime: RuntimeEmulator, core: client.CoreV1Api
):
    runtime.faults.fail_requests(500, seconds=0.2)

    with pytest.raises(client.ApiException):
        core.list_namespace()
    time.sleep(0.25)

    assert core.list_namespace().items


def test_given_latency_then_every_answer_is_delayed(runtime: RuntimeEmulator, core: client.CoreV1Api):
    core.list_namespace()
    runtime.faults.latency = 0.2

    started = time.monotonic()
    core.list_namespace()
    elapsed = time.monotonic() - started
    runtime.faults.clear()

    assert elapsed >= 0.2


def test_given_request_counts_then_reads_and_writes_are_told_apart_and_can_be_reset(
    runtime: RuntimeEmulator, apps: client.AppsV1Api, core: client.CoreV1Api
):
    apps.create_namespaced_deployment("default", deployment("web"))
    runtime.counts.reset()

    apps.read_namespaced_deployment("web", "default")
    core.list_namespaced_pod("default")
    core.read_namespace_status("default")
    assert (runtime.counts.writes, runtime.counts.reads, runtime.counts.total) == (0, 3, 3)
    assert runtime.counts.snapshot() == {
        ("get", "deployments.apps"): 1,
        ("list", "pods"): 1,
        ("get", "namespaces/status"): 1,
    }

    apps.patch_namespaced_deployment(
        "web",
        "default",
        deployment("web"),
        field_manager="kcp",
        force=True,
        _content_type="application/apply-patch+yaml",
    )
    apps.delete_namespaced_deployment("web", "default")
    assert (
        runtime.counts.count("apply"),
        runtime.counts.count("delete", "deployments.apps"),
        runtime.counts.writes,
    ) == (1, 1, 2)


def test_given_stored_objects_then_kmock_views_allow_pattern_assertions(
    runtime: RuntimeEmulator, core: client.CoreV1Api
):
    core.create_namespaced_config_map("default", {"metadata": {"name": "cm"}, "data": {"k": "v"}})

    assert runtime.objects["v1/configmaps", "default", "cm"] >= {"data": {"k": "v"}, "metadata": {"uid": ...}}
    assert runtime.resources["apps/v1/deployments"].kind == "Deployment"
