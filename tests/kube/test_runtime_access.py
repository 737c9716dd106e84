"""The control plane's identity in a runtime, probed as that identity against a real API server:
every verb on every kind its Role names, against objects it did not create and objects it would
create, and a list of writes it must be refused (deploy/runtime-access/: the rules and the guard).

Every write is a server-side dry run (``dryRun=All``): authorization and admission (the guard is a
ValidatingAdmissionPolicy) decide as they would for the real write, and nothing is stored.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from reconciler.access import GUARD, NAMESPACED_KINDS
from reconciler.kyma_crd import kyma_crd
from tests.support.kube import Runtime, RuntimePool

NS = "kyma-system"
OURS = {"operator.kyma-project.io/managed-by": "kyma"}
POD = {"containers": [{"name": "c", "image": "example.invalid/probe:1"}]}
SELECTOR = {"matchLabels": {"app": "probe"}}
TEMPLATE = {"metadata": {"labels": {"app": "probe"}}, "spec": POD}
# A minimal valid object of each kind the Role names: (apiVersion, plural, kind, body).
KINDS: list[tuple[str, str, str, dict[str, Any]]] = [
    ("v1", "configmaps", "ConfigMap", {"data": {"a": "b"}}),
    ("v1", "secrets", "Secret", {"stringData": {"a": "b"}}),
    ("v1", "services", "Service", {"spec": {"ports": [{"port": 80}]}}),
    ("v1", "serviceaccounts", "ServiceAccount", {}),
    (
        "v1",
        "persistentvolumeclaims",
        "PersistentVolumeClaim",
        {"spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}},
    ),
    ("apps/v1", "deployments", "Deployment", {"spec": {"selector": SELECTOR, "template": TEMPLATE}}),
    (
        "apps/v1",
        "statefulsets",
        "StatefulSet",
        {"spec": {"selector": SELECTOR, "template": TEMPLATE, "serviceName": "probe"}},
    ),
    ("apps/v1", "daemonsets", "DaemonSet", {"spec": {"selector": SELECTOR, "template": TEMPLATE}}),
    (
        "batch/v1",
        "jobs",
        "Job",
        {"spec": {"template": {"spec": {**POD, "restartPolicy": "Never"}}}},
    ),
    (
        "batch/v1",
        "cronjobs",
        "CronJob",
        {
            "spec": {
                "schedule": "0 0 * * *",
                "jobTemplate": {"spec": {"template": {"spec": {**POD, "restartPolicy": "Never"}}}},
            }
        },
    ),
    (
        "autoscaling/v2",
        "horizontalpodautoscalers",
        "HorizontalPodAutoscaler",
        {
            "spec": {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "x"},
                "maxReplicas": 2,
            }
        },
    ),
    (
        "policy/v1",
        "poddisruptionbudgets",
        "PodDisruptionBudget",
        {"spec": {"selector": SELECTOR, "minAvailable": 1}},
    ),
    ("networking.k8s.io/v1", "networkpolicies", "NetworkPolicy", {"spec": {"podSelector": SELECTOR}}),
    (
        "rbac.authorization.k8s.io/v1",
        "roles",
        "Role",
        {"rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]},
    ),
    (
        "rbac.authorization.k8s.io/v1",
        "rolebindings",
        "RoleBinding",
        {
            # a Role whose rights the identity holds itself (else the API server's escalation check refuses)
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "probe-reader"},
            "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": NS}],
        },
    ),
    (
        "operator.kyma-project.io/v1beta2",
        "kymas",
        "Kyma",
        {"spec": {"channel": "regular"}},
    ),
    ("operator.kyma-project.io/v1alpha1", "kedas", "Keda", {"spec": {}}),
]


@dataclass
class Answer:
    status: int
    message: str


class Identity:
    """Requests to the runtime's API server with one bearer token."""

    def __init__(self, runtime: Runtime, token: str) -> None:
        self.url = runtime.server.url
        self.token = token
        self.context = ssl.create_default_context(cadata=runtime.server.files.ca_pem.decode())

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        dry_run: bool = True,
    ) -> Answer:
        if dry_run and method != "GET":
            path += ("&" if "?" in path else "?") + "dryRun=All"
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            self.url + path,
            data=data,
            method=method,
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": content_type},
        )
        try:
            with urllib.request.urlopen(request, timeout=10, context=self.context) as response:
                return Answer(response.status, "")
        except urllib.error.HTTPError as exc:
            payload = exc.read()
            try:
                message = json.loads(payload).get("message", "")
            except ValueError:
                message = payload.decode(errors="replace")
            return Answer(exc.code, message)


def doc(
    api_version: str, kind: str, name: str, body: dict[str, Any], *, labels: dict[str, str] | None = None
) -> dict:
    meta: dict[str, Any] = {"name": name, "namespace": NS}
    if labels:
        meta["labels"] = labels
    return {"apiVersion": api_version, "kind": kind, "metadata": meta, **body}


@pytest.fixture
def identity(real_runtime: Runtime) -> Identity:
    return Identity(real_runtime, real_runtime.grant_control_plane_access())


@pytest.fixture(scope="module")
def dry_run_identity(runtime_pool: RuntimePool) -> Iterator[Identity]:
    """The identity in one runtime shared by the refusals: each is a dry run or a read, so none
    changes what the next one meets (a fresh API server per refusal cost its start, ~3 s each)."""
    runtime = runtime_pool.take()
    try:
        yield Identity(runtime, runtime.grant_control_plane_access())
    finally:
        runtime_pool.release(runtime)


@pytest.fixture
def foreign(real_runtime: Runtime) -> dict[str, dict]:
    """One object of each kind, created by the runtime's administrator: not the control plane's
    (the Kyma's CRD first, which a first reconcile would install)."""
    real_runtime.register_crd(kyma_crd())
    real_runtime.apply(doc("rbac.authorization.k8s.io/v1", "Role", "probe-reader", KINDS[13][3]))
    created = {}
    for api_version, plural, kind, body in KINDS:
        created[plural] = real_runtime.apply(doc(api_version, kind, "someone-elses", body))
    return created


def test_the_role_names_every_kind_it_grants_and_no_wildcard_but_kymas_own_group():
    granted = {
        (group, r) for group, resources, verbs in NAMESPACED_KINDS if "create" in verbs for r in resources
    }
    probed = {(api_version.rpartition("/")[0], plural) for api_version, plural, _, _ in KINDS}

    assert {g for g, r in granted if r == "*"} == {"operator.kyma-project.io"}
    assert {(g, r) for g, r in granted if r != "*"} <= probed
    assert ("", "namespaces") not in granted


def test_objects_it_did_not_create_can_be_read_but_never_changed_or_deleted(real_runtime, identity, foreign):
    for api_version, plural, _kind, _body in KINDS:
        path = real_runtime.path(api_version, plural, "someone-elses", NS)

        assert identity.call("GET", path).status == 200, plural
        assert identity.call("GET", real_runtime.path(api_version, plural, None, NS)).status == 200, plural
        patched = identity.call(
            "PATCH",
            path,
            {"metadata": {"labels": {"probe": "x"}}},
            content_type="application/merge-patch+json",
        )
        assert patched.status == 403 and "only objects it created" in patched.message, (plural, patched)
        updated = _put_labelled(real_runtime, identity, api_version, plural, path)
        assert updated.status == 403 and "only objects it created" in updated.message, (plural, updated)
        deleted = identity.call("DELETE", path)
        assert deleted.status == 403 and "only objects it created" in deleted.message, (plural, deleted)


def _put_labelled(runtime: Runtime, identity: Identity, api_version: str, plural: str, path: str) -> Answer:
    """A PUT of the object with one label more, as the identity, of a fresh copy: a controller may
    write the object meanwhile (a Deployment's annotations), and a stale copy is refused as a
    conflict (409) before admission decides; not every kind takes an unconditional update."""
    for _ in range(5):
        live = runtime.get(api_version, plural, "someone-elses", NS)
        live["metadata"].setdefault("labels", {})["probe"] = "x"
        answer = identity.call("PUT", path, live)
        if answer.status != 409:
            return answer
    return answer


def test_objects_of_its_own_can_be_created_changed_and_deleted(real_runtime, identity, foreign):
    for api_version, plural, kind, body in KINDS:
        collection = real_runtime.path(api_version, plural, None, NS)
        unlabelled = identity.call("POST", collection, doc(api_version, kind, "probe-new", body))
        assert unlabelled.status == 403 and "creates only objects labelled" in unlabelled.message, (
            plural,
            unlabelled,
        )
        assert (
            identity.call("POST", collection, doc(api_version, kind, "probe-new", body, labels=OURS)).status
            == 201
        ), plural
        # one of its own, created for real, then changed and deleted
        created = identity.call(
            "PATCH",
            real_runtime.path(api_version, plural, "probe-ours", NS)
            + "?fieldManager=kyma-control-plane&force=true",
            doc(api_version, kind, "probe-ours", body, labels=OURS),
            content_type="application/apply-patch+yaml",
            dry_run=False,
        )
        assert created.status == 201, (plural, created)
        path = real_runtime.path(api_version, plural, "probe-ours", NS)
        patched = identity.call(
            "PATCH",
            path,
            {"metadata": {"annotations": {"probe": "x"}}},
            content_type="application/merge-patch+json",
        )
        assert patched.status == 200, (plural, patched)
        assert identity.call("DELETE", path, dry_run=False).status == 200, plural


@pytest.mark.parametrize(
    ("what", "method", "path", "body"),
    [
        ("delete the namespace it manages", "DELETE", "/api/v1/namespaces/kyma-system", None),
        (
            "label the namespace it manages",
            "PATCH",
            "/api/v1/namespaces/kyma-system",
            {"metadata": {"labels": {"x": "y"}}},
        ),
        ("delete its own namespace", "DELETE", "/api/v1/namespaces/kyma-control-plane", None),
        (
            "create another namespace",
            "POST",
            "/api/v1/namespaces",
            {"metadata": {"name": "elsewhere", "labels": OURS}},
        ),
        ("delete another namespace", "DELETE", "/api/v1/namespaces/default", None),
        (
            "bind cluster-admin in its namespace",
            "POST",
            "/apis/rbac.authorization.k8s.io/v1/namespaces/kyma-system/rolebindings",
            {
                "metadata": {"name": "escalate", "labels": OURS},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": "cluster-admin",
                },
                "subjects": [
                    {
                        "kind": "ServiceAccount",
                        "name": "kyma-control-plane",
                        "namespace": "kyma-control-plane",
                    }
                ],
            },
        ),
        (
            "bind cluster-admin cluster-wide",
            "POST",
            "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
            {
                "metadata": {"name": "escalate", "labels": OURS},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": "cluster-admin",
                },
                "subjects": [
                    {
                        "kind": "ServiceAccount",
                        "name": "kyma-control-plane",
                        "namespace": "kyma-control-plane",
                    }
                ],
            },
        ),
        (
            "write a Secret in default",
            "POST",
            "/api/v1/namespaces/default/secrets",
            {"metadata": {"name": "x", "labels": OURS}},
        ),
        ("read Secrets in default", "GET", "/api/v1/namespaces/default/secrets", None),
        (
            "ask for another account's token by a Secret",
            "POST",
            "/api/v1/namespaces/kyma-system/secrets",
            {
                "metadata": {
                    "name": "steal",
                    "labels": OURS,
                    "annotations": {"kubernetes.io/service-account.name": "default"},
                },
                "type": "kubernetes.io/service-account-token",
            },
        ),
        (
            "mint another account's token",
            "POST",
            "/api/v1/namespaces/kyma-system/serviceaccounts/default/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"audiences": []}},
        ),
        ("run a command in a pod", "POST", "/api/v1/namespaces/kyma-system/pods/any/exec?command=sh", None),
        (
            "write a pod directly",
            "POST",
            "/api/v1/namespaces/kyma-system/pods",
            {"metadata": {"name": "p", "labels": OURS}, "spec": POD},
        ),
        (
            "delete the Kyma CRD",
            "DELETE",
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/kymas.operator.kyma-project.io",
            None,
        ),
        (
            "create a CRD of its choosing",
            "POST",
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            {"metadata": {"name": "things.example.com", "labels": OURS}},
        ),
        ("delete a node", "DELETE", "/api/v1/nodes/any", None),
        (
            "write another webhook configuration",
            "POST",
            "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
            {"metadata": {"name": "other", "labels": OURS}},
        ),
        (
            "remove its own guard",
            "DELETE",
            f"/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/{GUARD}",
            None,
        ),
    ],
)
def test_writes_beyond_a_reconcile_are_refused(dry_run_identity, what, method, path, body):
    content_type = "application/merge-patch+json" if method == "PATCH" else "application/json"

    answer = dry_run_identity.call(method, path, body, content_type=content_type)

    assert answer.status == 403, (what, answer)
