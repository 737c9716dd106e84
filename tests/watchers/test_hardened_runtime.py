"""A runtime whose kyma-system enforces the "restricted" Pod Security Standard and denies all traffic:
the rendered watcher is admitted and runs there, a watcher without the pod security fields would
not, and deleting the Kyma takes every rendered object out again."""

from __future__ import annotations

import copy

import pytest

from fleet.models import Kyma
from fleet.services import kymas as kyma_services
from pki import services as pki
from runtime_emulator import KubernetesError
from tests.reconciler.helpers import conditions, reconcile
from tests.support.runtimes import connected_kyma, keda_module, klm_watcher
from watchers.rendering import removal_order

pytestmark = pytest.mark.django_db

RENDERED = [
    ("PriorityClass", "skr-webhook-priority", None),
    ("NetworkPolicy", "kyma-project.io--seed-to-watcher", "kyma-system"),
    ("NetworkPolicy", "kyma-project.io--watcher-to-apiserver", "kyma-system"),
    ("NetworkPolicy", "kyma-project.io--watcher-to-dns", "kyma-system"),
    ("NetworkPolicy", "kyma-project.io--metrics-to-watcher", "kyma-system"),
    ("Secret", "skr-webhook-tls", "kyma-system"),
    ("Secret", "skr-webhook-pull-secret", "kyma-system"),
    ("Service", "skr-webhook", "kyma-system"),
    ("Service", "skr-webhook-metrics", "kyma-system"),
    ("Deployment", "skr-webhook", "kyma-system"),
    ("ValidatingWebhookConfiguration", "skr-webhook", None),
]


@pytest.fixture(autouse=True)
def catalog():
    pki.ca_bootstrap()
    klm_watcher()
    return keda_module()


@pytest.fixture
def pull_secret_file(tmp_path, settings):
    path = tmp_path / "config.json"
    path.write_text('{"auths": {"registry.example.com": {"auth": "cm9ib3Q6cGFzcw=="}}}')
    settings.WATCHER_IMAGE_PULL_SECRET_FILE = str(path)
    return path


@pytest.fixture
def hardened(runtimes):
    runtime = runtimes()
    runtime.harden("kyma-system")
    return runtime


def without_seccomp(deployment: dict) -> dict:
    """The watcher Deployment as we rendered it before pod security was taken into account."""
    old = copy.deepcopy(deployment)
    for key in ("metadata", "status"):
        old.pop(key, None)
    old["metadata"] = {"name": "old-skr-webhook", "namespace": "kyma-system"}
    old["spec"]["selector"] = {"matchLabels": {"app": "old-skr-webhook"}}
    old["spec"]["template"]["metadata"]["labels"] = {"app": "old-skr-webhook"}
    del old["spec"]["template"]["spec"]["securityContext"]["seccompProfile"]
    return old


class TestHardenedRuntime:
    def test_given_a_hardened_runtime_when_reconciling_then_the_watcher_is_admitted_and_ready(self, hardened):
        kyma = connected_kyma(hardened)
        reconcile(kyma)
        assert conditions(kyma)["SKRWebhook"] == ("True", "Ready")
        (pod,) = hardened.list_objects("Pod", "kyma-system", label_selector="app=skr-webhook")
        assert pod["spec"]["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}

    def test_given_a_hardened_runtime_then_the_watcher_as_rendered_before_gets_no_pod(self, hardened):
        kyma = connected_kyma(hardened)
        reconcile(kyma)
        old = without_seccomp(hardened.get_object("Deployment", "skr-webhook", "kyma-system"))

        hardened.apply_as_user(old)  # workloads are admitted, as on a real server; their pods are not

        assert hardened.list_objects("Pod", "kyma-system", label_selector="app=old-skr-webhook") == []
        status = hardened.get_object("Deployment", "old-skr-webhook", "kyma-system")["status"]
        failure = next(c for c in status["conditions"] if c["type"] == "ReplicaFailure")
        assert failure["status"] == "True" and failure["reason"] == "FailedCreate"
        assert 'is forbidden: violates PodSecurity "restricted:latest": seccompProfile' in failure["message"]
        assert not status.get("readyReplicas")

    def test_given_a_hardened_namespace_then_a_pod_breaking_restricted_is_forbidden(self, hardened):
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "rooted", "namespace": "kyma-system"},
            "spec": {"containers": [{"name": "server", "image": "busybox"}]},
        }
        with pytest.raises(KubernetesError) as refused:
            hardened.create_as_user(pod)
        assert refused.value.status == 403
        assert refused.value.message.startswith(
            'pods "rooted" is forbidden: violates PodSecurity "restricted:latest": '
            'allowPrivilegeEscalation != false (container "server" must set '
            "securityContext.allowPrivilegeEscalation=false), unrestricted capabilities"
        )
        assert "runAsNonRoot != true" in refused.value.message and "seccompProfile" in refused.value.message

    def test_given_a_plain_runtime_then_the_same_pod_is_admitted(self, runtimes):
        runtime = runtimes()
        runtime.create_as_user(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "rooted", "namespace": "default"},
                "spec": {"containers": [{"name": "server", "image": "busybox"}]},
            }
        )
        assert runtime.get_object("Pod", "rooted", "default") is not None

    def test_given_a_refused_watcher_pod_then_the_kyma_says_why(self, hardened):
        kyma = connected_kyma(hardened)
        reconcile(kyma)
        live = hardened.get_object("Deployment", "skr-webhook", "kyma-system")
        # Someone added a field the control plane does not manage (so no drift it would correct),
        # which the namespace's pod security level refuses.
        live["spec"]["template"]["spec"]["hostNetwork"] = True
        hardened.apply_as_user(
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {
                    "name": "skr-webhook",
                    "namespace": "kyma-system",
                    "annotations": live["metadata"]["annotations"],
                },
                "spec": live["spec"],
            },
            field_manager="kubectl-edit",
        )
        reconcile(kyma)
        assert conditions(kyma)["SKRWebhook"] == ("False", "WatcherFailing")
        message = next(c["message"] for c in kyma.conditions if c["type"] == "SKRWebhook")
        assert message.startswith("the runtime watcher cannot run: FailedCreate: pods ")
        assert 'violates PodSecurity "restricted:latest": host namespaces' in message


class TestImagePullSecretInTheRuntime:
    def test_given_a_pull_secret_file_then_the_runtime_pulls_the_watcher_with_it(
        self, hardened, pull_secret_file
    ):
        kyma = connected_kyma(hardened)
        reconcile(kyma)
        secret = hardened.get_object("Secret", "skr-webhook-pull-secret", "kyma-system")
        assert secret["type"] == "kubernetes.io/dockerconfigjson"
        deployment = hardened.get_object("Deployment", "skr-webhook", "kyma-system")
        assert deployment["spec"]["template"]["spec"]["imagePullSecrets"] == [
            {"name": "skr-webhook-pull-secret"}
        ]
        assert conditions(kyma)["SKRWebhook"] == ("True", "Ready")

    def test_given_no_pull_secret_file_then_none_in_the_runtime(self, hardened):
        kyma = connected_kyma(hardened)
        reconcile(kyma)
        assert hardened.get_object("Secret", "skr-webhook-pull-secret", "kyma-system") is None
        deployment = hardened.get_object("Deployment", "skr-webhook", "kyma-system")
        assert "imagePullSecrets" not in deployment["spec"]["template"]["spec"]

    def test_given_the_file_broke_after_the_start_then_the_kyma_is_in_error_saying_so(
        self, hardened, pull_secret_file
    ):
        pull_secret_file.write_text("{not json")
        kyma = connected_kyma(hardened)
        reconcile(kyma)
        assert kyma.state == "Error"
        assert conditions(kyma)["SKRWebhook"] == ("False", "ImagePullSecretError")


class TestDeletion:
    def test_given_a_reconciled_kyma_when_deleted_then_every_rendered_object_leaves_the_runtime(
        self, hardened, pull_secret_file
    ):
        kyma = connected_kyma(hardened)
        reconcile(kyma)
        for kind, name, namespace in RENDERED:
            assert hardened.get_object(kind, name, namespace) is not None, (kind, name)
        kyma_services.kyma_delete(kyma=kyma)
        assert reconcile(Kyma.objects.get(pk=kyma.pk)) is None
        for kind, name, namespace in RENDERED:
            assert hardened.get_object(kind, name, namespace) is None, (kind, name)
        assert hardened.get_object("NetworkPolicy", "deny-all", "kyma-system") is not None  # the customer's

    def test_the_removal_covers_every_kind_and_name_we_render(self):
        assert {(kind, name, namespace) for _, kind, name, namespace in removal_order()} == set(RENDERED)
