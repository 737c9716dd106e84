"""The registry of runtime steps: every kind the control plane owns in a runtime is declared once,
with every part the engine, the deletion, the runtime-access rules and the docs read; a step that
lacks one, or a kind a reconcile writes without a declaration, fails here."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from django.utils import timezone

from fleet.services import kymas as kyma_services
from fleet.services import modules as module_services
from pki import services as pki
from reconciler import access
from reconciler.context import ReconcileContext
from reconciler.registry import Read, Rule, missing_parts
from reconciler.steps import REGISTRY, WATCHED
from tests.reconciler.helpers import CONFIGMAP, reconcile
from tests.support.runtimes import connected_kyma, keda_module, klm_watcher
from tools.docs import runtime_steps

pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def catalog() -> None:
    pki.ca_bootstrap()
    klm_watcher()
    keda_module()


def test_every_step_declares_every_part():
    assert missing_parts(REGISTRY.steps) == []
    assert [step.name for step in REGISTRY.in_order()] == [
        "runtime-kyma",
        "runtime-watcher",
        "modules",
        "module-catalog",
        "sync-resources",
    ]
    # The module CRs go first (their operators clean up meanwhile), the runtime's Kyma last.
    removal = [step.name for step in REGISTRY.in_removal_order()]
    assert (removal[0], removal[-1]) == ("modules", "runtime-kyma")


def test_a_step_that_lacks_a_part_is_named():
    step = REGISTRY.in_order()[1]
    kind = step.kinds[0]
    broken = dataclasses.replace(
        step,
        remove=None,
        kinds=(
            dataclasses.replace(kind, access=()),
            dataclasses.replace(kind, names=(), description="", kind="Other"),
            dataclasses.replace(
                kind, kind="Wrong", access=(Rule("scheduling.k8s.io", (kind.plural,), ("get",)),)
            ),
            dataclasses.replace(step.kinds[2], read=Read.EVERY, watched=True, kind="Loud"),
        ),
    )
    other = dataclasses.replace(REGISTRY.in_order()[0], name="again", kinds=(kind,))

    found = missing_parts([broken, other])

    assert f"step {step.name}: no remove function" in found
    assert f"step {step.name}, kind {kind.kind}: no access rules" in found
    assert f"step {step.name}, kind Other: no description" in found
    assert f"step {step.name}, kind Wrong: its rule for {kind.plural} is not of the kind's scope" in found
    assert f"step {step.name}, kind Loud: watched, although read every reconcile" in found
    assert f"step again, kind {kind.kind}: declared by step {step.name} too (the same names)" in found


def test_what_each_step_renders_is_of_a_kind_it_declares(runtimes, catalog):
    kyma = connected_kyma(runtimes())
    module_services.syncresource_apply(
        kyma=kyma, module=keda_module(), name="keda-config", manifests=CONFIGMAP.format(name="keda", level=1)
    )
    ctx = ReconcileContext(kyma=kyma, now=timezone.now())
    for step in REGISTRY.in_order():
        docs = step.render(ctx)
        assert docs, step.name
        for doc in docs:
            meta = doc["metadata"]
            declared = step.kind_of(doc["apiVersion"], doc["kind"], meta["name"])
            assert declared is not None, (step.name, doc["kind"], meta["name"])
            assert declared.namespaced == bool(meta.get("namespace")), (step.name, doc["kind"])


def test_a_reconcile_and_a_deletion_touch_only_declared_kinds(runtimes, catalog):
    runtime = runtimes()
    kyma = connected_kyma(runtime)
    module_services.syncresource_apply(
        kyma=kyma, module=keda_module(), name="keda-config", manifests=CONFIGMAP.format(name="keda", level=1)
    )
    reconcile(kyma)
    reconcile(kyma)
    kyma_services.kyma_delete(kyma=kyma)
    reconcile(kyma)

    declared = {(kind.group, kind.plural) for _, kind in REGISTRY.kinds()}
    groups_of_any = {kind.group for _, kind in REGISTRY.kinds() if kind.plural == "*"}
    touched = set()
    for (verb, resource), _ in runtime.counts.snapshot().items():
        plural, _, group = resource.split("/")[0].partition(".")
        if verb in ("create", "update", "patch", "apply", "delete", "get", "list"):
            touched.add((group, plural))
    undeclared = {(g, p) for g, p in touched if (g, p) not in declared and g not in groups_of_any}
    assert touched and undeclared == set()


def test_the_access_rules_are_the_registrys_kinds():
    docs = access.base_manifests()
    cluster = next(d for d in docs if d["kind"] == "ClusterRole")
    role = next(d for d in docs if d["kind"] == "Role")

    assert cluster["rules"] == REGISTRY.rules(cluster=True)
    assert role["rules"] == REGISTRY.rules(cluster=False)
    for _, kind in REGISTRY.kinds():
        for rule in kind.access:
            rules = cluster["rules"] if rule.cluster else role["rules"]
            assert any(
                rule.group in r["apiGroups"]
                and (set(rule.resources) <= set(r["resources"]) or r["resources"] == ["*"])
                and set(rule.verbs) <= set(r["verbs"])
                and set(rule.names) <= set(r.get("resourceNames", rule.names))
                for r in rules
            ), (kind.kind, rule)


def test_the_runtime_watcher_reports_changes_of_the_rechecked_kinds():
    rechecked = {(k.group, k.plural) for _, k in REGISTRY.kinds() if k.read is Read.RECHECKED}
    assert {(group, plural) for group, _, plural, _ in WATCHED} == rechecked


def test_the_docs_table_has_a_row_per_kind():
    table = runtime_steps.markdown()
    for step, kind in REGISTRY.kinds():
        assert f"| {step.name} |" in table and kind.description in table, (step.name, kind.kind)
    assert "<!-- generated: runtime-steps -->" in (ROOT / "docs/operators/runtimes.md").read_text()
    guide = (ROOT / "docs/contributors/runtime-kinds.md").read_text()
    assert guide.startswith("# Add a kind to what runtimes get")
