"""Deployments and pods: simulated readiness, failure modes and the kubelet hook."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from kubernetes import client

from runtime_emulator import DeploymentChange, DeploymentEvent, EmulatorHost, PodHealth, RuntimeEmulator
from tests.runtime_emulator.helpers import deployment


def _conditions(dep: client.V1Deployment) -> dict[str, tuple[str, str]]:
    return {c.type: (c.status, c.reason) for c in dep.status.conditions}


def _waiting_reasons(core: client.CoreV1Api, app: str) -> list[str | None]:
    pods = core.list_namespaced_pod("default", label_selector=f"app={app}").items
    return [
        s.state.waiting.reason if s.state.waiting else None for p in pods for s in p.status.container_statuses
    ]


def test_given_a_deployment_when_created_then_pods_run_and_the_status_reports_it(
    apps: client.AppsV1Api, core: client.CoreV1Api
):
    apps.create_namespaced_deployment("default", deployment("web", replicas=2))

    status = apps.read_namespaced_deployment("web", "default").status
    pods = core.list_namespaced_pod("default", label_selector="app=web").items

    assert (status.observed_generation, status.replicas, status.updated_replicas) == (1, 2, 2)
    assert (status.ready_replicas, status.available_replicas, status.unavailable_replicas) == (2, 2, None)
    assert _conditions(apps.read_namespaced_deployment("web", "default")) == {
        "Available": ("True", "MinimumReplicasAvailable"),
        "Progressing": ("True", "NewReplicaSetAvailable"),
    }
    assert len(pods) == 2
    for pod in pods:
        assert pod.status.phase == "Running" and pod.metadata.owner_references[0].kind == "Deployment"
        assert pod.metadata.labels["pod-template-hash"] and pod.metadata.name.startswith("web-")
        assert [(s.name, s.ready, s.state.running is not None) for s in pod.status.container_statuses] == [
            ("main", True, True)
        ]


def test_given_a_new_template_then_pods_are_replaced_and_scaling_changes_their_number(
    apps: client.AppsV1Api, core: client.CoreV1Api
):
    apps.create_namespaced_deployment("default", deployment("web"))
    old_pods = {p.metadata.name for p in core.list_namespaced_pod("default").items}

    apps.patch_namespaced_deployment("web", "default", deployment("web", image="nginx:1.28"))
    apps.patch_namespaced_deployment("web", "default", {"spec": {"replicas": 3}})

    pods = core.list_namespaced_pod("default").items
    assert len(pods) == 3 and not old_pods & {p.metadata.name for p in pods}
    assert {p.spec.containers[0].image for p in pods} == {"nginx:1.28"}
    assert apps.read_namespaced_deployment("web", "default").status.observed_generation == 3


@pytest.mark.parametrize(
    ("health", "reason", "phase"),
    [
        (PodHealth.crash_loop_backoff(), "CrashLoopBackOff", "Running"),
        (PodHealth.image_pull_backoff("nginx:404"), "ImagePullBackOff", "Pending"),
        (PodHealth.unready(), None, "Running"),
    ],
)
def test_given_a_failure_mode_then_pods_and_deployment_status_show_it_until_cleared(
    runtime: RuntimeEmulator,
    apps: client.AppsV1Api,
    core: client.CoreV1Api,
    health: PodHealth,
    reason: str | None,
    phase: str,
):
    runtime.set_pod_health("default", "web", health)
    apps.create_namespaced_deployment("default", deployment("web"))

    failing = apps.read_namespaced_deployment("web", "default")
    pod = core.list_namespaced_pod("default", label_selector="app=web").items[0]
    runtime.set_pod_health("default", "web", None)

    assert failing.status.ready_replicas is None and failing.status.unavailable_replicas == 1
    assert _conditions(failing)["Available"] == ("False", "MinimumReplicasUnavailable")
    assert _waiting_reasons(core, "web") == [None]  # healthy again
    assert pod.status.phase == phase and pod.status.container_statuses[0].ready is False
    assert (pod.status.container_statuses[0].state.waiting.reason if reason else None) == reason
    assert apps.read_namespaced_deployment("web", "default").status.ready_replicas == 1


def test_given_a_deleted_deployment_then_its_pods_go_and_a_deleted_pod_is_replaced(
    runtime: RuntimeEmulator, apps: client.AppsV1Api, core: client.CoreV1Api
):
    apps.create_namespaced_deployment("default", deployment("web"))
    first = core.list_namespaced_pod("default").items[0].metadata.name

    core.delete_namespaced_pod(first, "default")
    replaced = [p.metadata.name for p in core.list_namespaced_pod("default").items]
    apps.delete_namespaced_deployment("web", "default")

    assert len(replaced) == 1 and replaced[0] != first
    assert core.list_namespaced_pod("default").items == []


@pytest.fixture
def kubelet(runtime: RuntimeEmulator) -> list[DeploymentEvent]:
    """A kubelet hook that records events and leaves readiness pending (to be reported)."""
    events: list[DeploymentEvent] = []

    async def hook(event: DeploymentEvent) -> PodHealth | None:
        events.append(event)
        return None

    runtime.kubelet = hook
    return events


def _webhook_deployment() -> dict[str, Any]:
    manifest = deployment("skr-webhook", namespace="default")
    pod_spec = manifest["spec"]["template"]["spec"]
    pod_spec["containers"][0] |= {
        "command": ["/webhook"],
        "args": ["--port=8443"],
        "env": [
            {"name": "MODE", "value": "strict"},
            {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "tls", "key": "token"}}},
            {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        ],
        "envFrom": [{"configMapRef": {"name": "settings"}, "prefix": "CFG_"}],
        "volumeMounts": [{"name": "certs", "mountPath": "/etc/certs"}],
    }
    pod_spec["volumes"] = [{"name": "certs", "secret": {"secretName": "tls"}}]
    return manifest


def _secret(cert: bytes) -> dict[str, Any]:
    data = {"tls.crt": base64.b64encode(cert).decode(), "token": base64.b64encode(b"t0k3n").decode()}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "tls", "namespace": "default"},
        "data": data,
    }


def test_given_a_kubelet_hook_when_a_deployment_is_created_then_it_gets_env_and_files_and_reports_readiness(
    runtime: RuntimeEmulator, host: EmulatorHost, apps: client.AppsV1Api, kubelet: list[DeploymentEvent]
):
    runtime.create_as_user(_secret(b"CERT-1"))
    runtime.create_as_user(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "settings", "namespace": "default"},
            "data": {"level": "debug"},
        }
    )
    apps.create_namespaced_deployment("default", _webhook_deployment())
    pending = apps.read_namespaced_deployment("skr-webhook", "default")

    (event,) = kubelet
    host.run(event.report(PodHealth.running()))

    (container,) = event.containers
    assert event.change is DeploymentChange.CREATED and event.emulator is runtime
    assert (container.command, container.args) == (("/webhook",), ("--port=8443",))
    assert container.env == {
        "MODE": "strict",
        "TOKEN": "t0k3n",
        "POD_NAMESPACE": "default",
        "CFG_level": "debug",
    }
    assert container.files == {"/etc/certs/tls.crt": b"CERT-1", "/etc/certs/token": b"t0k3n"}
    assert pending.status.ready_replicas is None
    assert apps.read_namespaced_deployment("skr-webhook", "default").status.ready_replicas == 1


def test_given_a_kubelet_hook_then_template_and_secret_changes_and_deletion_are_notified(
    runtime: RuntimeEmulator, host: EmulatorHost, apps: client.AppsV1Api, kubelet: list[DeploymentEvent]
):
    runtime.create_as_user(_secret(b"CERT-1"))
    runtime.create_as_user(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings", "namespace": "default"}}
    )
    apps.create_namespaced_deployment("default", _webhook_deployment())
    apps.patch_namespaced_deployment("skr-webhook", "default", {"spec": {"replicas": 2}})  # not notified
    apps.patch_namespaced_deployment(
        "skr-webhook", "default", {"spec": {"template": {"metadata": {"annotations": {"r": "2"}}}}}
    )
    host.run(kubelet[0].report(PodHealth.running()))  # stale: the template has changed since
    runtime.apply_as_user(_secret(b"CERT-2"))
    apps.delete_namespaced_deployment("skr-webhook", "default")

    assert [e.change for e in kubelet] == [
        DeploymentChange.CREATED,
        DeploymentChange.TEMPLATE_CHANGED,
        DeploymentChange.MOUNTS_CHANGED,
        DeploymentChange.DELETED,
    ]
    assert kubelet[2].containers[0].files["/etc/certs/tls.crt"] == b"CERT-2"
    assert kubelet[1].template_hash != kubelet[0].template_hash


def test_given_a_missing_secret_then_pods_wait_in_container_creating_until_it_exists(
    runtime: RuntimeEmulator, apps: client.AppsV1Api, core: client.CoreV1Api, kubelet: list[DeploymentEvent]
):
    runtime.create_as_user(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings", "namespace": "default"}}
    )
    apps.create_namespaced_deployment("default", _webhook_deployment())

    pod = core.list_namespaced_pod("default").items[0]
    waiting = pod.status.container_statuses[0].state.waiting
    notified_before = list(kubelet)
    runtime.create_as_user(_secret(b"CERT-1"))

    assert waiting.reason == "ContainerCreating" and 'secret "tls" not found' in waiting.message
    assert notified_before == []
    assert [e.change for e in kubelet] == [DeploymentChange.CREATED]


def test_given_a_hook_that_answers_at_once_then_readiness_follows_its_answer(
    runtime: RuntimeEmulator, apps: client.AppsV1Api
):
    async def hook(event: DeploymentEvent) -> PodHealth:
        return PodHealth.crash_loop_backoff() if event.name == "broken" else PodHealth.running()

    runtime.kubelet = hook
    apps.create_namespaced_deployment("default", deployment("fine"))
    apps.create_namespaced_deployment("default", deployment("broken"))

    assert apps.read_namespaced_deployment("fine", "default").status.ready_replicas == 1
    assert apps.read_namespaced_deployment("broken", "default").status.ready_replicas is None
