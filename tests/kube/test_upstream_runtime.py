"""A runtime that upstream's lifecycle-manager managed before: its runtime-watcher resources (as
upstream's skr-webhook/resources.yaml has them, applied as upstream applies them, field manager
``lifecycle-manager``) are taken over by the first reconcile, not duplicated: one set remains,
with upstream's names, and nothing only upstream had set."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from pki import services as pki
from reconciler.run import kyma_reconcile_run
from tests.support.kube import Runtime, connect_kyma
from tests.support.runtimes import keda_module, klm_watcher
from watchers.rendering import NETWORK_POLICIES, PRIORITY

pytestmark = pytest.mark.django_db

UPSTREAM = Path("/work/shared/upstream/fixtures/interop/lifecycle-manager_skr-webhook_resources.yaml")
UPSTREAM_MANAGER = "lifecycle-manager"
OURS = "kyma-control-plane"


def upstream_resources() -> list[dict]:
    docs = [d for d in yaml.safe_load_all(UPSTREAM.read_text()) if d]
    for doc in docs:
        if doc["kind"] != "PriorityClass":
            doc["metadata"]["namespace"] = "kyma-system"
    webhooks = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "skr-webhook", "labels": {"operator.kyma-project.io/managed-by": "kyma"}},
        "webhooks": [
            {
                "name": f"kcp-system.{name}.operator.kyma-project.io",
                "admissionReviewVersions": ["v1"],
                "clientConfig": {
                    "service": {
                        "name": "skr-webhook",
                        "namespace": "kyma-system",
                        "path": f"/validate/{name}",
                    }
                },
                "rules": [
                    {
                        "apiGroups": ["operator.kyma-project.io"],
                        "apiVersions": ["*"],
                        "resources": ["kymas"],
                        "operations": ["CREATE", "UPDATE", "DELETE"],
                    }
                ],
                "sideEffects": "NoneOnDryRun",
                "failurePolicy": "Ignore",
                "timeoutSeconds": 15,
            }
            for name in ("klm-watcher", "retired-watcher")
        ],
    }
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "skr-webhook-tls", "namespace": "kyma-system"},
        "data": {"ca.crt": "", "tls.crt": "", "tls.key": ""},
    }
    return [*docs, webhooks, secret]


def managers_of(obj: dict) -> set[str]:
    return {m["manager"] for m in obj["metadata"].get("managedFields") or ()}


@pytest.fixture
def upstream_runtime(real_runtime: Runtime) -> Runtime:
    real_runtime.grant_control_plane_access()  # creates kyma-system
    for doc in upstream_resources():
        real_runtime.apply(doc, manager=UPSTREAM_MANAGER)
    return real_runtime


def test_upstreams_runtime_watcher_resources_are_taken_over_not_duplicated(upstream_runtime):
    runtime = upstream_runtime
    pki.ca_bootstrap()
    klm_watcher()
    keda_module()
    kyma = connect_kyma(runtime)

    kyma_reconcile_run(kyma.pk)

    kyma.refresh_from_db()
    assert kyma.state != "Error", kyma.conditions
    policies = runtime.list("networking.k8s.io/v1", "networkpolicies", "kyma-system")
    assert sorted(p["metadata"]["name"] for p in policies) == sorted(NETWORK_POLICIES)
    deployments = runtime.list("apps/v1", "deployments", "kyma-system")
    services = runtime.list("v1", "services", "kyma-system")
    assert [d["metadata"]["name"] for d in deployments] == ["skr-webhook"]
    assert sorted(s["metadata"]["name"] for s in services) == ["skr-webhook", "skr-webhook-metrics"]
    objects = [
        *policies,
        *deployments,
        *services,
        runtime.get("scheduling.k8s.io/v1", "priorityclasses", "skr-webhook-priority"),
        runtime.get("admissionregistration.k8s.io/v1", "validatingwebhookconfigurations", "skr-webhook"),
        runtime.get("v1", "secrets", "skr-webhook-tls", "kyma-system"),
    ]
    for obj in objects:
        assert UPSTREAM_MANAGER not in managers_of(obj), obj["metadata"]["name"]
        assert OURS in managers_of(obj), obj["metadata"]["name"]
    # What only upstream had set is gone: its env variables, its volume, its retired webhook.
    container = deployments[0]["spec"]["template"]["spec"]["containers"][0]
    assert {e["name"] for e in container["env"]}.isdisjoint({"POD_NAME", "TLS_CALLBACK"})
    assert [v["name"] for v in deployments[0]["spec"]["template"]["spec"]["volumes"]] == ["tls"]
    webhooks = objects[-2]["webhooks"]
    assert "kcp-system.retired-watcher.operator.kyma-project.io" not in [w["name"] for w in webhooks]
    assert objects[-3]["value"] == PRIORITY == 1_000_000_000


def test_a_priority_class_of_another_value_is_replaced(real_runtime):
    """A PriorityClass's value cannot change in place (our earlier runtimes hold 2,000,000)."""
    runtime = real_runtime
    runtime.apply(
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {
                "name": "skr-webhook-priority",
                "labels": {"operator.kyma-project.io/managed-by": "kyma"},
            },
            "value": 2_000_000,
        },
        manager=OURS,
    )
    pki.ca_bootstrap()
    klm_watcher()
    keda_module()
    kyma = connect_kyma(runtime)

    kyma_reconcile_run(kyma.pk)

    live = runtime.get("scheduling.k8s.io/v1", "priorityclasses", "skr-webhook-priority")
    assert live["value"] == PRIORITY
    kyma.refresh_from_db()
    assert kyma.state != "Error", kyma.conditions


def test_our_network_policies_have_upstreams_names():
    names = [d["metadata"]["name"] for d in upstream_resources() if d["kind"] == "NetworkPolicy"]
    assert sorted(names) == sorted(NETWORK_POLICIES)
