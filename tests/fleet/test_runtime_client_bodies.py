"""The runtime client sends request bodies as the JSON data they are (the kubernetes client does
not walk them first: ``JSONApiClient``); a body that is not JSON data is refused with a clear
Permanent error, not a traceback, and nothing reaches the runtime."""

from __future__ import annotations

import datetime as dt

import pytest

from fleet.k8s.client import JSONApiClient, Permanent, RuntimeClient
from kernel.documents.yamlio import dump_yaml

CONFIG_MAP = {
    "apiVersion": "v1",
    "kind": "ConfigMap",
    "metadata": {"name": "settings", "namespace": "default", "labels": {"team": "a"}},
    "data": {"mode": "fast", "when": "2024-01-01"},
}


def client_of(runtime) -> RuntimeClient:
    return RuntimeClient.from_kubeconfig(dump_yaml([runtime.kubeconfig()]))


def test_a_body_of_json_data_goes_as_it_is():
    api = JSONApiClient()
    body = {"spec": {"items": [1, "two", {"three": None}]}}

    assert api.sanitize_for_serialization(body) is body
    assert api.sanitize_for_serialization([body]) == [body]
    # (what is not a dict or a list is still the client's to turn into JSON data)
    assert api.sanitize_for_serialization(dt.date(2024, 1, 1)) == "2024-01-01"


def test_given_a_runtime_when_an_object_is_applied_then_it_holds_the_body(runtimes):
    runtime = runtimes()
    client = client_of(runtime)

    applied, created = client.apply_created(CONFIG_MAP)

    assert created and applied["data"] == CONFIG_MAP["data"]
    assert client.get("v1", "ConfigMap", "settings", "default")["metadata"]["labels"] == {"team": "a"}


def test_given_a_body_that_is_not_json_data_then_it_is_refused_and_nothing_is_written(runtimes):
    runtime = runtimes()
    client = client_of(runtime)
    wrong = {**CONFIG_MAP, "data": {"when": dt.date(2024, 1, 1)}}

    with pytest.raises(Permanent, match="apply ConfigMap default/settings: the body is not JSON data"):
        client.apply(wrong)

    assert client.get("v1", "ConfigMap", "settings", "default") is None
