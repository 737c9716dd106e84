"""A module's manifest policy on write: the rule itself, then the API, the admin and ``manage.py
apply`` refusing a manifest with ``spec.manifests[i]`` and the reason."""

from __future__ import annotations

import io
from types import SimpleNamespace

import pytest
import yaml
from django.core.management import call_command
from django.core.management.base import CommandError
from django.urls import reverse

from fleet.models import SyncResource
from fleet.models.manifest_policy import ManifestPolicy
from fleet.services import modules
from kernel.errors import ValidationFailed
from tests.factories import KymaFactory, ModuleFactory

CONFIGMAP = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: kyma-system}\n"
CLUSTER_ROLE = "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: r}\nrules: []\n"
WIDGET_CRD = """\
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  scope: Namespaced
  names: {kind: Widget, plural: widgets}
"""


def policy(namespaces=(), kinds=(), cr_namespace="kyma-system") -> ManifestPolicy:
    module = SimpleNamespace(
        name="keda",
        cr_namespace=cr_namespace,
        manifest_namespaces=list(namespaces),
        manifest_kinds=list(kinds),
    )
    return ManifestPolicy.of(module)


def docs(*texts: str) -> list[dict]:
    return [yaml.safe_load(text) for text in texts]


class TestRule:
    def test_given_default_policy_then_namespaced_kinds_in_the_cr_namespace_pass(self):
        deployment = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d, namespace: kyma-system}\n"
        assert policy().check(docs(CONFIGMAP, deployment)) == []

    def test_given_default_policy_then_another_namespace_is_refused_with_the_allowed_ones(self):
        [refusal] = policy().check(docs(CONFIGMAP.replace("kyma-system", "kube-system")))
        assert refusal.path == "spec.manifests[0]"
        assert refusal.reason == (
            "ConfigMap kube-system/a: namespace kube-system is not one of module keda's namespaces "
            "(kyma-system)"
        )

    def test_given_listed_namespaces_then_they_replace_the_default(self):
        assert policy(namespaces=["keda"]).check(docs(CONFIGMAP))[0].index == 0
        assert policy(namespaces=["keda", "kyma-system"]).check(docs(CONFIGMAP)) == []
        assert policy(namespaces=["*"]).check(docs(CONFIGMAP.replace("kyma-system", "anywhere"))) == []

    def test_given_a_namespaced_kind_without_namespace_then_refused(self):
        [refusal] = policy().check(docs("apiVersion: v1\nkind: Secret\nmetadata: {name: s}\n"))
        assert refusal.reason == "Secret s is namespaced and needs metadata.namespace (one of: kyma-system)"

    @pytest.mark.parametrize(
        ("text", "gk"),
        [
            (CLUSTER_ROLE, "rbac.authorization.k8s.io/ClusterRole"),
            ("apiVersion: v1\nkind: Namespace\nmetadata: {name: kyma-system}\n", "Namespace"),
            (
                (
                    "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\n"
                    "metadata: {name: w}\n"
                ),
                "admissionregistration.k8s.io/ValidatingWebhookConfiguration",
            ),
            (WIDGET_CRD, "apiextensions.k8s.io/CustomResourceDefinition"),
        ],
    )
    def test_given_a_cluster_scoped_kind_not_listed_then_refused(self, text, gk):
        [refusal] = policy().check(docs(text))
        assert refusal.reason.endswith(f"is cluster-scoped; module keda's manifest policy does not list {gk}")

    def test_given_a_listed_cluster_scoped_kind_then_it_passes_with_or_without_version(self):
        assert (
            policy(kinds=[{"group": "rbac.authorization.k8s.io", "kind": "ClusterRole"}]).check(
                docs(CLUSTER_ROLE)
            )
            == []
        )
        other_version = [{"group": "rbac.authorization.k8s.io", "version": "v2", "kind": "ClusterRole"}]
        assert len(policy(kinds=other_version).check(docs(CLUSTER_ROLE))) == 1

    def test_given_an_unknown_kind_then_refused_unless_listed(self):
        widget = "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w, namespace: kyma-system}\n"
        [refusal] = policy().check(docs(widget))
        assert "Widget (example.com/v1) is not a kind whose scope the control plane knows" in refusal.reason
        assert "must list example.com/Widget" in refusal.reason
        listed = policy(kinds=[{"group": "example.com", "kind": "Widget"}])
        assert listed.check(docs(widget)) == []
        assert len(listed.check(docs(widget.replace("kyma-system", "elsewhere")))) == 1

    def test_given_the_kinds_crd_among_the_manifests_then_its_scope_is_known(self):
        widget = "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w, namespace: kyma-system}\n"
        crds = policy(kinds=[{"group": "apiextensions.k8s.io", "kind": "CustomResourceDefinition"}])
        assert crds.check(docs(WIDGET_CRD, widget)) == []
        [refusal] = crds.check(docs(WIDGET_CRD, widget.replace("kyma-system", "elsewhere")))
        assert refusal.index == 1

    def test_given_a_lookup_then_unknown_kinds_take_the_runtimes_scope(self):
        widget = "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\n"
        listed = policy(kinds=[{"group": "example.com", "kind": "Widget"}])
        assert listed.check(docs(widget)) == []  # scope unknown: no namespace is fine for now
        [refusal] = listed.check(docs(widget), fallback=lambda group, version, kind: True)
        assert "needs metadata.namespace" in refusal.reason


def sync_doc(kyma, module, manifests: str) -> dict:
    return {
        "apiVersion": "controlplane.kyma-project.io/v1alpha1",
        "kind": "SyncResource",
        "metadata": {"name": "s1", "namespace": kyma.namespace},
        "spec": {"kyma": kyma.name, "module": module.name, "manifests": manifests},
    }


@pytest.mark.django_db
class TestOnWrite:
    def test_given_a_cluster_role_when_posted_then_400_names_the_manifest(self, api):
        kyma, module = KymaFactory(), ModuleFactory(name="keda")
        response = api.post(
            "/api/v1/syncresources/",
            sync_doc(kyma, module, CONFIGMAP + "---\n" + CLUSTER_ROLE),
            format="json",
        )
        assert response.status_code == 400, response.json()
        [error] = response.json()["errors"]
        assert error["field"] == "spec.manifests[1]"
        assert "cluster-scoped; module keda's manifest policy does not list" in error["reason"]
        assert not SyncResource.objects.exists()

    def test_given_the_module_lists_the_kind_when_posted_then_created(self, api):
        kyma = KymaFactory()
        module = ModuleFactory(manifest_kinds=[{"group": "rbac.authorization.k8s.io", "kind": "ClusterRole"}])
        response = api.post("/api/v1/syncresources/", sync_doc(kyma, module, CLUSTER_ROLE), format="json")
        assert response.status_code == 201, response.json()

    def test_given_a_module_document_with_a_policy_when_applied_then_it_round_trips(self, api):
        doc = {
            "apiVersion": "controlplane.kyma-project.io/v1alpha1",
            "kind": "Module",
            "metadata": {"name": "keda"},
            "spec": {
                "channels": {"regular": "1.0.0"},
                "resource": {
                    "group": "operator.kyma-project.io",
                    "version": "v1alpha1",
                    "kind": "Keda",
                    "plural": "kedas",
                },
                "manifestPolicy": {
                    "namespaces": ["kyma-system", "keda"],
                    "kinds": [{"group": "rbac.authorization.k8s.io", "kind": "ClusterRole"}],
                },
            },
        }
        response = api.post("/api/v1/modules/", doc, format="json")
        assert response.status_code == 201, response.json()
        assert response.json()["spec"]["manifestPolicy"] == doc["spec"]["manifestPolicy"]

    @pytest.mark.parametrize(
        ("policy_doc", "field"),
        [
            ({"namespaces": ["Not_A_Label"]}, "spec.manifestPolicy.namespaces[0]"),
            ({"kinds": [{"kind": "ClusterRole"}]}, "spec.manifestPolicy.kinds[0].group"),
            ({"kinds": [{"group": "", "kind": "X", "verbs": []}]}, "spec.manifestPolicy.kinds[0].verbs"),
        ],
    )
    def test_given_a_bad_policy_when_applied_then_400_names_the_field(self, api, policy_doc, field):
        doc = {
            "apiVersion": "controlplane.kyma-project.io/v1alpha1",
            "kind": "Module",
            "metadata": {"name": "keda"},
            "spec": {
                "channels": {"regular": "1.0.0"},
                "resource": {"version": "v1", "kind": "Keda", "plural": "kedas"},
                "manifestPolicy": policy_doc,
            },
        }
        response = api.post("/api/v1/modules/", doc, format="json")
        assert response.status_code == 400
        assert field in [e["field"] for e in response.json()["errors"]], response.json()

    def test_given_a_refused_manifest_when_applied_with_manage_py_then_the_error_names_it(self, tmp_path):
        kyma, module = KymaFactory(), ModuleFactory(name="keda")
        path = tmp_path / "sync.yaml"
        path.write_text(yaml.safe_dump(sync_doc(kyma, module, CONFIGMAP.replace("kyma-system", "default"))))
        with pytest.raises(CommandError) as failure:
            call_command("apply", "-f", str(path), stdout=io.StringIO(), stderr=io.StringIO())
        assert "spec.manifests[0]: ConfigMap default/a: namespace default is not one of module keda's" in str(
            failure.value
        )
        assert not SyncResource.objects.exists()

    def test_given_a_refused_manifest_when_added_in_the_admin_then_the_form_says_why(self, admin_client):
        kyma, module = KymaFactory(), ModuleFactory(name="keda")
        response = admin_client.post(
            reverse("admin:controlplane_syncresource_add"),
            {
                "kyma": kyma.pk,
                "module": module.pk,
                "name": "s1",
                "manifests": CLUSTER_ROLE,
                "apply_strategy": "ServerSideApply",
                "deletion_policy": "Delete",
                "labels": "{}",
                "annotations": "{}",
            },
        )
        assert response.status_code == 200
        assert "manifests[0]: ClusterRole r is cluster-scoped" in response.content.decode()
        assert not SyncResource.objects.exists()

    def test_given_the_service_when_saving_then_the_policy_holds_there_too(self):
        with pytest.raises(ValidationFailed) as failure:
            modules.syncresource_apply(
                kyma=KymaFactory(), module=ModuleFactory(), name="s", manifests=CLUSTER_ROLE
            )
        assert failure.value.errors[0][1].startswith("manifests[0]: ClusterRole r is cluster-scoped")
