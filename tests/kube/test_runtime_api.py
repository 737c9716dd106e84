"""What we give a runtime, as its real API server judges it: our watcher's pod under the
``restricted`` Pod Security Standard, and the runtime's Kyma CRD (upstream's samples accepted,
invalid Kymas refused, unknown fields pruned, the status subresource)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from kubernetes.client.rest import ApiException

from reconciler.runtime_kyma import kyma_crd
from tests.support.kube import Runtime, wait_for
from watchers import rendering

pytestmark = pytest.mark.django_db

UPSTREAM = Path("/work/shared/upstream")
KYMAS = ("operator.kyma-project.io/v1beta2", "kymas")


def create(runtime: Runtime, doc: dict) -> dict:
    return runtime.call(
        "POST",
        runtime.path(doc["apiVersion"], runtime.plural(doc), None, doc["metadata"].get("namespace")),
        body=doc,
    )


def refused(runtime: Runtime, doc: dict) -> ApiException:
    with pytest.raises(ApiException) as caught:
        create(runtime, doc)
    return caught.value


def restricted_namespace(runtime: Runtime, name: str) -> None:
    runtime.apply(
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": name, "labels": {"pod-security.kubernetes.io/enforce": "restricted"}},
        }
    )
    wait_for(lambda: runtime.get("v1", "serviceaccounts", "default", name), what="the default ServiceAccount")


def pod_of(template: dict, namespace: str, name: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {**copy.deepcopy(template["metadata"]), "name": name, "namespace": namespace},
        "spec": copy.deepcopy(template["spec"]),
    }


def test_our_watcher_pod_passes_the_restricted_pod_security_standard(real_runtime):
    restricted_namespace(real_runtime, "restricted")
    template = rendering.deployment("trigger")["spec"]["template"]
    template["spec"].pop("priorityClassName")  # (its PriorityClass is not in this namespace's test)

    created = create(real_runtime, pod_of(template, "restricted", "watcher"))

    assert created["metadata"]["name"] == "watcher"
    # The same namespace does refuse what breaks the standard: the check above was real.
    privileged = pod_of(template, "restricted", "privileged")
    privileged["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    error = refused(real_runtime, privileged)
    assert error.status == 403 and "violates PodSecurity" in error.body


def test_the_runtime_kyma_crd_accepts_upstreams_kymas(real_runtime):
    real_runtime.register_crd(kyma_crd())
    real_runtime.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kcp-system"}})
    samples = [
        UPSTREAM / "samples" / "kyma.yaml",
        UPSTREAM / "fixtures" / "lifecycle-manager" / "e2e-kyma.yaml",
    ]
    for sample in samples:
        doc = yaml.safe_load(sample.read_text())
        stored = create(real_runtime, doc)
        assert stored["spec"]["channel"] == doc["spec"]["channel"]
        names = [m["name"] for m in doc["spec"].get("modules") or ()]
        assert [m["name"] for m in stored["spec"].get("modules") or ()] == names
    exported = yaml.safe_load(
        (UPSTREAM / "fixtures" / "lifecycle-manager" / "kubectl-export-kymas.yaml").read_text()
    )
    for item in exported["items"]:
        doc = {k: item[k] for k in ("apiVersion", "kind", "spec")}
        doc["metadata"] = {
            k: item["metadata"][k]
            for k in ("name", "namespace", "labels", "annotations")
            if k in item["metadata"]
        }
        stored = create(real_runtime, doc)
        # the status subresource: what a create carries in status is dropped ...
        assert "modules" not in (stored.get("status") or {})
        # ... and upstream's status is accepted on /status
        path = real_runtime.path(*KYMAS, doc["metadata"]["name"], doc["metadata"]["namespace"]) + "/status"
        updated = real_runtime.call(
            "PATCH", path, body={"status": item["status"]}, content_type="application/merge-patch+json"
        )
        assert updated["status"]["modules"] == item["status"]["modules"]
        assert updated["spec"] == stored["spec"]


def test_the_runtime_kyma_crd_refuses_invalid_kymas_and_prunes_unknown_fields(real_runtime):
    real_runtime.register_crd(kyma_crd())
    real_runtime.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kyma-system"}})
    valid = {
        "apiVersion": "operator.kyma-project.io/v1beta2",
        "kind": "Kyma",
        "metadata": {"name": "default", "namespace": "kyma-system"},
        "spec": {"channel": "regular", "modules": [{"name": "keda"}]},
    }
    for spec, field in (
        ({"modules": []}, "spec.channel"),
        ({"channel": 7}, "spec.channel"),
        ({"channel": "regular", "modules": [{"channel": "fast"}]}, "spec.modules[0].name"),
        ({"channel": "regular", "modules": [{"name": "keda"}, {"name": "keda"}]}, "spec.modules[1]"),
    ):
        error = refused(real_runtime, {**valid, "spec": spec})
        assert error.status == 422, spec
        assert field in error.body, (spec, error.body)

    stored = create(real_runtime, {**valid, "spec": {**valid["spec"], "unknown": 1}, "extra": {"a": 1}})

    assert "unknown" not in stored["spec"] and "extra" not in stored
    # Defaults of a module entry are filled in as upstream's CRD fills them.
    assert stored["spec"]["modules"][0]["customResourcePolicy"] == "CreateAndDelete"
    # Spec written through /status is ignored; status written on the object is ignored.
    path = real_runtime.path(*KYMAS, "default", "kyma-system")
    after = real_runtime.call(
        "PATCH",
        path + "/status",
        body={"spec": {"channel": "fast"}, "status": {"state": "Ready"}},
        content_type="application/merge-patch+json",
    )
    assert after["spec"]["channel"] == "regular" and after["status"]["state"] == "Ready"
    after = real_runtime.call(
        "PATCH",
        path,
        body={"spec": {"channel": "fast"}, "status": {"state": "Error"}},
        content_type="application/merge-patch+json",
    )
    assert after["spec"]["channel"] == "fast" and after["status"]["state"] == "Ready"
