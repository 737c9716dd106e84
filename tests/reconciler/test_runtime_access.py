"""The RBAC the control plane needs in a runtime: deploy/runtime-access/ is what the code renders,
and modules whose manifest policy reaches beyond kyma-system get exactly their extra rules."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import yaml
from django.core.management import call_command

from reconciler.access import base_manifests, module_manifests
from tests.support.runtimes import keda_module

pytestmark = pytest.mark.django_db

SHIPPED = Path(__file__).resolve().parents[2] / "deploy" / "runtime-access" / "runtime-access.yaml"


def test_the_shipped_file_is_what_the_code_renders():
    shipped = [d for d in yaml.safe_load_all(SHIPPED.read_text()) if d]

    assert shipped == base_manifests()


def test_nothing_cluster_wide_is_granted_without_a_name_except_reading():
    cluster_role = next(d for d in base_manifests() if d["kind"] == "ClusterRole")

    for rule in cluster_role["rules"]:
        if not rule.get("resourceNames"):
            assert set(rule["verbs"]) <= {"get", "list", "watch"}, rule
    assert "*" not in {r for rule in cluster_role["rules"] for r in rule["resources"]}


def test_a_module_within_kyma_system_needs_nothing_more():
    assert module_manifests([keda_module()]) == []


def test_a_module_reaching_further_gets_its_namespaces_and_cluster_kinds():
    keda = keda_module()
    keda.manifest_namespaces = ["kyma-system", "keda"]
    keda.manifest_kinds = [
        {"group": "rbac.authorization.k8s.io", "kind": "ClusterRole"},
        {"group": "", "kind": "ConfigMap"},  # namespaced: covered by its namespaces
    ]

    docs = module_manifests([keda])

    kinds = [(d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]) for d in docs]
    assert kinds == [
        ("Namespace", None, "keda"),
        ("Role", "keda", "kyma-control-plane-module-keda"),
        ("RoleBinding", "keda", "kyma-control-plane-module-keda"),
        ("ClusterRole", None, "kyma-control-plane-module-keda"),
        ("ClusterRoleBinding", None, "kyma-control-plane-module-keda"),
    ]
    cluster_role = docs[3]
    assert [(r["apiGroups"], r["resources"]) for r in cluster_role["rules"]] == [
        (["rbac.authorization.k8s.io"], ["clusterroles"])
    ]


def test_the_command_prints_the_base_and_the_modules():
    keda = keda_module()
    keda.manifest_namespaces = ["keda"]
    keda.save()
    out = io.StringIO()

    call_command("runtime_access", stdout=out)

    docs = [d for d in yaml.safe_load_all(out.getvalue()) if d]
    assert docs[: len(base_manifests())] == base_manifests()
    assert ("Role", "keda") in [(d["kind"], d["metadata"].get("namespace")) for d in docs]


def test_the_role_in_kyma_system_names_its_kinds_and_never_the_namespace_itself():
    role = next(d for d in base_manifests() if d["kind"] == "Role")

    resources = {
        (group, r) for rule in role["rules"] for group in rule["apiGroups"] for r in rule["resources"]
    }
    assert "*" not in {group for group, _ in resources}
    assert {group for group, r in resources if r == "*"} == {"operator.kyma-project.io"}
    assert not {r for _, r in resources if r.startswith("namespaces") or "/" in r}


def test_the_guard_binds_its_policy_to_the_identity_and_denies():
    guard = {d["kind"]: d for d in base_manifests() if d["metadata"]["name"] == "kyma-control-plane-guard"}

    policy, binding = guard["ValidatingAdmissionPolicy"], guard["ValidatingAdmissionPolicyBinding"]
    assert binding["spec"] == {"policyName": "kyma-control-plane-guard", "validationActions": ["Deny"]}
    assert policy["spec"]["failurePolicy"] == "Fail"
    assert (
        "system:serviceaccount:kyma-control-plane:kyma-control-plane"
        in policy["spec"]["matchConditions"][0]["expression"]
    )
    assert all(v["reason"] == "Forbidden" for v in policy["spec"]["validations"])


def test_a_module_whose_cr_is_outside_kymas_group_gets_a_rule_for_it_in_its_namespace():
    keda = keda_module()
    keda.cr_group = "keda.example.com"

    docs = module_manifests([keda])

    role = next(d for d in docs if d["kind"] == "Role")
    assert role["metadata"]["namespace"] == "kyma-system"
    assert role["rules"] == [
        {
            "apiGroups": ["keda.example.com"],
            "resources": ["kedas", "kedas/status"],
            "verbs": ["get", "list", "watch", "create", "patch", "update", "delete"],
        }
    ]
    assert not [d for d in docs if d["kind"] == "Namespace"]


def test_a_listed_namespaced_kind_the_base_does_not_name_gets_a_rule_in_the_modules_namespaces():
    keda = keda_module()
    keda.manifest_kinds = [
        {"group": "", "kind": "ReplicationController"},
        {"group": "apps", "kind": "Deployment"},
    ]

    role = next(d for d in module_manifests([keda]) if d["kind"] == "Role")

    assert [(r["apiGroups"], r["resources"]) for r in role["rules"]] == [([""], ["replicationcontrollers"])]
