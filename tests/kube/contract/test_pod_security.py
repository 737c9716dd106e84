"""Pod Security admission at ``restricted``, as customers enforce it on ``kyma-system``: a pod that
breaks the standard is refused with a 403 naming every violation, the pod template of our runtime
watcher's Deployment (``watchers.rendering.deployment``) is admitted, and a workload object is not
checked itself (its pods are)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.kube.contract.backends import wait_for
from tests.kube.contract.calls import Client, path
from watchers import rendering

RESTRICTED = {"pod-security.kubernetes.io/enforce": "restricted"}


@pytest.fixture
def client(backend) -> Client:
    return Client(backend.api)


@pytest.fixture
def restricted(backend, client) -> str:
    """A namespace enforcing "restricted", with its default ServiceAccount (pods name it)."""
    ns = backend.namespace("restricted", labels=RESTRICTED)
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": ns}}
    assert client.apply(path("v1", "serviceaccounts", ns, "default"), account, manager="contract").ok
    return ns


def pod(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


PRIVILEGED = {"containers": [{"name": "c", "image": "nginx", "securityContext": {"privileged": True}}]}


def test_a_privileged_pod_is_refused_naming_every_violation(client, restricted):
    answer = client.create(path("v1", "pods", restricted), pod("p", PRIVILEGED))

    assert answer.status == 403
    assert answer.reason == "Forbidden"
    assert answer.message == (
        'pods "p" is forbidden: violates PodSecurity "restricted:latest": '
        'privileged (container "c" must not set securityContext.privileged=true), '
        "allowPrivilegeEscalation != false "
        '(container "c" must set securityContext.allowPrivilegeEscalation=false), '
        'unrestricted capabilities (container "c" must set securityContext.capabilities.drop=["ALL"]), '
        'runAsNonRoot != true (pod or container "c" must set securityContext.runAsNonRoot=true), '
        'seccompProfile (pod or container "c" must set securityContext.seccompProfile.type to '
        '"RuntimeDefault" or "Localhost")'
    )
    assert answer.body["details"] == {"name": "p", "kind": "pods"}


def test_the_runtime_watchers_pod_template_is_admitted_once_its_priority_class_exists(client, restricted):
    template = rendering.deployment("trigger")["spec"]["template"]
    watcher = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "watcher", **template["metadata"]}}
    watcher["spec"] = template["spec"]
    classes = path("scheduling.k8s.io/v1", "priorityclasses", None)

    early = client.create(path("v1", "pods", restricted), watcher)
    priority = rendering.priority_class()
    client.apply(f"{classes}/{rendering.PRIORITY_CLASS_NAME}", priority, manager="contract", force=True)
    # (a real server's Priority admission reads classes from its cache: a moment later)
    admitted = wait_for(
        lambda: (answer := client.create(path("v1", "pods", restricted), watcher)).status != 403 and answer,
        what="the new PriorityClass known to admission",
    )

    assert early.status == 403
    assert early.message == (
        f'pods "watcher" is forbidden: no PriorityClass with name {rendering.PRIORITY_CLASS_NAME} was found'
    )
    assert admitted.status == 201, admitted.message
    assert admitted.body["spec"]["priority"] == priority["value"]


def test_a_workload_is_not_checked_itself_and_an_unlabelled_namespace_enforces_nothing(
    backend, client, restricted
):
    labels = {"app": "privileged"}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d"},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": PRIVILEGED},
        },
    }
    plain = backend.namespace("unrestricted")
    account = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": "default", "namespace": plain},
    }
    client.apply(path("v1", "serviceaccounts", plain, "default"), account, manager="contract")

    workload = client.create(path("apps/v1", "deployments", restricted), deployment)
    elsewhere = client.create(path("v1", "pods", plain), pod("p", PRIVILEGED))

    assert workload.status == 201
    assert elsewhere.status == 201
