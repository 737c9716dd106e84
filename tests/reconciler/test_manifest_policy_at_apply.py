"""The manifest policy again just before apply: a policy tightened after the write (or a row
written before it existed) refuses the manifest there, and nothing of its SyncResource is applied."""

from __future__ import annotations

import pytest
from django.db.models import F

from fleet.models import SyncResource
from fleet.services import modules as module_services
from pki import services as pki
from tests.reconciler.helpers import conditions, reconcile
from tests.support.runtimes import connected_kyma, keda_module, klm_watcher

pytestmark = pytest.mark.django_db

CONFIGMAP = (
    "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: a, namespace: {namespace}}}\n"
    'data: {{level: "{level}"}}\n'
)
CLUSTER_ROLE = (
    "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: keda-reader}\nrules: []\n"
)
CLUSTER_ROLE_RULE = {"group": "rbac.authorization.k8s.io", "kind": "ClusterRole"}


@pytest.fixture(autouse=True)
def catalog():
    pki.ca_bootstrap()
    klm_watcher()
    return keda_module()


def set_policy(**fields) -> None:
    keda = keda_module()
    for name, value in fields.items():
        setattr(keda, name, value)
    module_services.module_save(module=keda)


def write_behind_the_policy(resource: SyncResource, manifests: str) -> None:
    """Manifests stored without the write-time check, as by a release before policies existed."""
    SyncResource.objects.filter(pk=resource.pk).update(manifests=manifests, generation=F("generation") + 1)


def states(resource: SyncResource) -> list[tuple[str, str, str]]:
    resource.refresh_from_db()
    return [(e["kind"], e["state"], e.get("message", "")) for e in resource.manifest_status]


def test_given_a_policy_tightened_after_the_write_when_reconciled_then_nothing_of_it_is_applied(runtimes):
    runtime = runtimes()
    kyma = connected_kyma(runtime)
    set_policy(manifest_kinds=[CLUSTER_ROLE_RULE])
    resource, _ = module_services.syncresource_apply(
        kyma=kyma,
        module=keda_module(),
        name="keda",
        manifests=CONFIGMAP.format(namespace="kyma-system", level="info") + "---\n" + CLUSTER_ROLE,
    )
    reconcile(kyma)
    assert [s for _, s, _ in states(resource)] == ["Applied", "Applied"]

    set_policy(manifest_kinds=[])
    write_behind_the_policy(
        resource, CONFIGMAP.format(namespace="kyma-system", level="debug") + "---\n" + CLUSTER_ROLE
    )
    reconcile(kyma)

    assert states(resource) == [
        (
            "ConfigMap",
            "Pending",
            "not applied: spec.manifests[1] of this SyncResource is refused by the manifest policy",
        ),
        (
            "ClusterRole",
            "Failed",
            (
                "refused by the manifest policy: ClusterRole keda-reader is cluster-scoped; "
                "module keda's manifest policy does not list rbac.authorization.k8s.io/ClusterRole"
            ),
        ),
    ]
    assert runtime.get_object("ConfigMap", "a", "kyma-system")["data"] == {"level": "info"}  # not applied
    assert runtime.get_object("ClusterRole", "keda-reader") is not None  # nor pruned
    assert conditions(kyma)["SyncResources"] == ("False", "ApplyFailed")
    assert kyma.state == "Error"


def test_given_namespaces_narrowed_when_reconciled_then_a_manifest_outside_them_is_failed(runtimes):
    runtime = runtimes()
    kyma = connected_kyma(runtime)
    set_policy(manifest_namespaces=["kyma-system", "keda"])
    resource, _ = module_services.syncresource_apply(
        kyma=kyma, module=keda_module(), name="keda", manifests=CONFIGMAP.format(namespace="keda", level="1")
    )
    set_policy(manifest_namespaces=["kyma-system"])
    reconcile(kyma)
    [(kind, state, message)] = states(resource)
    assert (kind, state) == ("ConfigMap", "Failed")
    assert "namespace keda is not one of module keda's namespaces (kyma-system)" in message
    assert runtime.get_object("ConfigMap", "a", "keda") is None


def test_given_a_listed_kind_the_runtime_serves_namespaced_when_it_has_no_namespace_then_refused(runtimes):
    runtime = runtimes()
    kyma = connected_kyma(runtime)
    runtime.create_as_user(
        {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {
                "group": "example.com",
                "scope": "Namespaced",
                "names": {
                    "kind": "Widget",
                    "plural": "widgets",
                    "singular": "widget",
                    "listKind": "WidgetList",
                },
                "versions": [
                    {
                        "name": "v1",
                        "served": True,
                        "storage": True,
                        "schema": {
                            "openAPIV3Schema": {
                                "type": "object",
                                "x-kubernetes-preserve-unknown-fields": True,
                            }
                        },
                    }
                ],
            },
        }
    )
    set_policy(manifest_kinds=[{"group": "example.com", "kind": "Widget"}])
    # The control plane cannot know Widget's scope at write time: listed and without a namespace, it passes.
    resource, _ = module_services.syncresource_apply(
        kyma=kyma,
        module=keda_module(),
        name="keda",
        manifests="apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\n",
    )
    reconcile(kyma)
    [(kind, state, message)] = states(resource)
    assert (kind, state) == ("Widget", "Failed")
    assert message.endswith("Widget w is namespaced and needs metadata.namespace (one of: kyma-system)")
    assert runtime.get_object("Widget", "w", "default") is None
