"""The runtime-watcher resources as rendered: valid Kubernetes objects that carry what a runtime with
deny-all NetworkPolicies and the "restricted" Pod Security Standard needs, and, when configured,
the image pull secret of a private registry (never shown to people)."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys

import kubernetes_validate
import pytest
from django.urls import reverse

from kernel.documents.hashing import HASH_ANNOTATION, document_hash
from tests.deploy.manifests import KUBERNETES_VERSION, ROOT
from tests.factories import KymaFactory, WatcherFactory
from watchers.rendering import redacted, runtime_watcher_resources

pytestmark = pytest.mark.django_db

TLS = {"ca.crt": b"ca", "tls.crt": b"crt", "tls.key": b"key"}
REGISTRY_PASSWORD = "s3cr3t-registry-password"
DOCKER_CONFIG = {
    "auths": {
        "registry.example.com": {
            "username": "robot",
            "password": REGISTRY_PASSWORD,
            "auth": base64.b64encode(f"robot:{REGISTRY_PASSWORD}".encode()).decode(),
        }
    }
}


@pytest.fixture
def docker_config_file(tmp_path, settings):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(DOCKER_CONFIG))
    settings.WATCHER_IMAGE_PULL_SECRET_FILE = str(path)
    return path


def rendered() -> dict[tuple[str, str], dict]:
    docs = runtime_watcher_resources(watchers=[WatcherFactory()], tls=dict(TLS))
    return {(doc["kind"], doc["metadata"]["name"]): doc for doc in docs}


def pod_spec(docs: dict[tuple[str, str], dict]) -> dict:
    return docs["Deployment", "skr-webhook"]["spec"]["template"]["spec"]


def pod_labels(docs: dict[tuple[str, str], dict]) -> dict:
    return docs["Deployment", "skr-webhook"]["spec"]["template"]["metadata"]["labels"]


def selects_the_pod(selector: dict, labels: dict) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


class TestSchemas:
    def test_every_rendered_object_validates_strictly(self, docker_config_file):
        for doc in rendered().values():
            kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)

    def test_every_rendered_object_carries_its_content_hash(self, docker_config_file):
        for doc in rendered().values():
            stamp = doc["metadata"]["annotations"].pop(HASH_ANNOTATION)
            if not doc["metadata"]["annotations"]:
                del doc["metadata"]["annotations"]
            assert stamp == document_hash(doc)


class TestRestrictedPodSecurity:
    def test_the_pod_and_its_containers_meet_the_restricted_standard(self):
        spec = pod_spec(rendered())
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["runAsUser"] > 0
        for container in spec["containers"]:
            context = container["securityContext"]
            assert context["allowPrivilegeEscalation"] is False
            assert context["capabilities"] == {"drop": ["ALL"]}
            assert context["readOnlyRootFilesystem"] is True

    def test_the_pod_opts_out_of_the_istio_sidecar(self):
        assert pod_labels(rendered())["sidecar.istio.io/inject"] == "false"

    def test_the_pod_runs_with_a_high_priority_class_that_is_never_the_default(self):
        docs = rendered()
        priority = docs["PriorityClass", pod_spec(docs)["priorityClassName"]]
        assert "namespace" not in priority["metadata"]
        assert priority["value"] >= 1_000_000 and priority["globalDefault"] is False

    def test_a_separate_metrics_service_reaches_the_metrics_port(self):
        docs = rendered()
        service = docs["Service", "skr-webhook-metrics"]
        assert selects_the_pod(service["spec"]["selector"], pod_labels(docs))
        ports = {p["containerPort"] for p in pod_spec(docs)["containers"][0]["ports"]}
        assert [p["targetPort"] for p in service["spec"]["ports"]] == [2112]
        assert 2112 in ports


class TestNetworkPolicies:
    def allowed(self, direction: str) -> set[tuple[str, int]]:
        docs = rendered()
        allowed = set()
        for (kind, _), doc in docs.items():
            if kind != "NetworkPolicy":
                continue
            spec = doc["spec"]
            assert doc["metadata"]["namespace"] == "kyma-system"
            assert selects_the_pod(spec["podSelector"]["matchLabels"], pod_labels(docs))
            for rule in spec.get(direction.lower(), []):
                allowed |= {(p["protocol"], p["port"]) for p in rule["ports"]}
            assert set(spec["policyTypes"]) <= {"Ingress", "Egress"}
        return allowed

    def test_four_policies_select_the_watcher_pod(self):
        assert sum(kind == "NetworkPolicy" for kind, _ in rendered()) == 4

    def test_the_api_server_and_scrapers_reach_the_webhook_and_metrics_ports(self):
        assert self.allowed("Ingress") == {("TCP", 8443), ("TCP", 2112)}

    def test_the_watcher_reaches_dns_and_the_listener_port_it_is_given(self, settings):
        settings.WATCHER_KCP_ADDR = "gateway.kcp.example.com:9443"
        assert self.allowed("Egress") == {("UDP", 53), ("TCP", 53), ("TCP", 9443)}

    def test_a_listener_address_without_a_port_is_reached_on_443(self, settings):
        settings.WATCHER_KCP_ADDR = "gateway.kcp.example.com"
        assert ("TCP", 443) in self.allowed("Egress")

    def test_the_policies_are_applied_before_the_pod_that_needs_them(self):
        kinds = [kind for kind, _ in rendered()]
        assert max(i for i, k in enumerate(kinds) if k == "NetworkPolicy") < kinds.index("Deployment")
        assert kinds.index("PriorityClass") < kinds.index("Deployment")


class TestImagePullSecret:
    def test_given_no_pull_secret_file_then_no_pull_secret_and_no_image_pull_secrets(self):
        docs = rendered()
        assert ("Secret", "skr-webhook-pull-secret") not in docs
        assert "imagePullSecrets" not in pod_spec(docs)

    def test_given_a_pull_secret_file_then_a_docker_config_secret_the_pod_pulls_with(
        self, docker_config_file
    ):
        docs = rendered()
        secret = docs["Secret", "skr-webhook-pull-secret"]
        assert secret["metadata"]["namespace"] == "kyma-system"
        assert secret["type"] == "kubernetes.io/dockerconfigjson"
        assert json.loads(base64.b64decode(secret["data"][".dockerconfigjson"])) == DOCKER_CONFIG
        assert pod_spec(docs)["imagePullSecrets"] == [{"name": "skr-webhook-pull-secret"}]

    def test_given_a_rotated_file_then_the_next_render_carries_the_new_content(self, docker_config_file):
        before = rendered()["Secret", "skr-webhook-pull-secret"]
        docker_config_file.write_text(json.dumps({"auths": {"other.example.com": {"auth": "eDp5"}}}))
        after = rendered()["Secret", "skr-webhook-pull-secret"]
        assert after["data"] != before["data"]
        assert (
            after["metadata"]["annotations"][HASH_ANNOTATION]
            != before["metadata"]["annotations"][HASH_ANNOTATION]
        )

    def test_redacted_documents_hide_the_registry_credentials(self, docker_config_file):
        docs = redacted(rendered().values())
        secret = next(d for d in docs if d["metadata"]["name"] == "skr-webhook-pull-secret")
        assert secret["data"] == {".dockerconfigjson": "<redacted>"}
        assert REGISTRY_PASSWORD not in json.dumps(docs)
        assert base64.b64encode(json.dumps(DOCKER_CONFIG).encode()).decode()[:24] not in json.dumps(docs)

    def test_the_kyma_page_shows_the_pull_secret_redacted(self, admin_client, docker_config_file):
        kyma = KymaFactory()
        response = admin_client.get(reverse("admin:controlplane_kyma_change", args=[kyma.pk]))
        html = response.content.decode()
        assert response.status_code == 200
        assert "skr-webhook-pull-secret" in html and ".dockerconfigjson: &lt;redacted&gt;" in html
        assert REGISTRY_PASSWORD not in html and '"robot"' not in html

    def test_given_the_file_broke_after_the_start_then_the_kyma_page_says_so(
        self, admin_client, docker_config_file
    ):
        docker_config_file.write_text("{not json")
        kyma = KymaFactory()
        response = admin_client.get(reverse("admin:controlplane_kyma_change", args=[kyma.pk]))
        assert response.status_code == 200
        assert "WATCHER_IMAGE_PULL_SECRET_FILE" in response.content.decode()


def start_settings(tmp_path, pull_secret_file: str) -> subprocess.CompletedProcess:
    env = {
        "PATH": os.environ.get("PATH", ""),
        "DJANGO_DEBUG": "1",
        "CONTROLPLANE_STATE_DIR": str(tmp_path / "state"),
        "WATCHER_IMAGE_PULL_SECRET_FILE": pull_secret_file,
    }
    return subprocess.run(
        [sys.executable, "-c", "import controlplane.settings"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


class TestSetting:
    @pytest.mark.parametrize(
        ("content", "why"),
        [
            (None, "cannot read"),
            ("{not json", "is not valid JSON (line 1, column 2)"),
            ('{"registry.example.com": {}}', 'needs an "auths" object'),
        ],
        ids=["missing", "not-json", "not-a-docker-config"],
    )
    def test_an_unusable_file_stops_the_start_with_a_clear_message(self, tmp_path, content, why):
        path = tmp_path / "config.json"
        if content is not None:
            path.write_text(content)
        result = start_settings(tmp_path, str(path))
        assert result.returncode != 0
        (message,) = result.stderr.strip().splitlines()  # one line, no traceback
        assert message.startswith("configuration error: WATCHER_IMAGE_PULL_SECRET_FILE:")
        assert str(path) in message and why in message

    def test_a_docker_config_file_is_accepted_and_its_content_never_printed(self, tmp_path):
        path = tmp_path / "config.json"
        path.write_text(json.dumps(DOCKER_CONFIG))
        result = start_settings(tmp_path, str(path))
        assert result.returncode == 0, result.stderr
        assert REGISTRY_PASSWORD not in result.stdout + result.stderr
