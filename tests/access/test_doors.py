"""Every door, every action: a user scoped to one region sees and changes only that region's
Kymas, and a viewer writes nowhere (the scoped-access matrix of issue 35).

Doors: admin (list, page, edit, delete, a bulk action, create), dashboard (counts), API (list,
get, update, delete, reconcile one, ?all=true, create), watch, YAML apply, rollouts (start,
resume, in the API and the admin), audit (API and admin), events."""

from __future__ import annotations

import json

import pytest
import requests
from django.utils import timezone

from fleet.models import Kyma, Rollout, RolloutTarget
from fleet.models.rollout import RolloutKind, RolloutState
from fleet.services import modules as module_services
from kernel.models import AuditEntry
from listener.models import WatchEventRecord
from tests.access.conftest import EU, EU_ONLY, US
from tests.factories import ModuleFactory
from tests.support.processes import start_web

pytestmark = pytest.mark.django_db(transaction=True)
RECONCILE_TASK = "controlplane.kyma_reconcile"


def reconciled(queued) -> list[int]:
    return sorted(task.args[0] for task in queued if task.name == RECONCILE_TASK)


def names(answer) -> set[str]:
    return {doc["metadata"]["name"] for doc in answer.json()["results"]}


def kyma_doc(name: str, labels: dict) -> dict:
    return {
        "apiVersion": "operator.kyma-project.io/v1beta2",
        "kind": "Kyma",
        "metadata": {"name": name, "namespace": "kcp-system", "labels": labels},
        "spec": {"channel": "regular"},
    }


# --- admin ------------------------------------------------------------------------------------


def test_admin_list_and_pages_hold_only_the_scope(fleet, person):
    eu = person("eu-op", "operator", EU_ONLY)
    listed = eu.admin.get("/admin/controlplane/kyma/")
    assert listed.status_code == 200
    assert b"eu-1" in listed.content and b"eu-2" in listed.content and b"us-1" not in listed.content
    assert eu.admin.get(f"/admin/controlplane/kyma/{fleet.eu.pk}/change/").status_code == 200
    assert eu.admin.get(f"/admin/controlplane/kyma/{fleet.us.pk}/change/").status_code == 404
    assert eu.admin.get(f"/admin/controlplane/kyma/{fleet.us.pk}/live/").status_code == 404


def test_admin_writes_reach_only_the_scope(fleet, person, task_queue):
    eu = person("eu-op", "operator", EU_ONLY)
    task_queue()
    assert eu.admin.post(f"/admin/controlplane/kyma/{fleet.eu.pk}/reconcile/").status_code == 302
    assert eu.admin.post(f"/admin/controlplane/kyma/{fleet.us.pk}/reconcile/").status_code == 404
    assert reconciled(task_queue()) == [fleet.eu.pk]

    bulk = eu.admin.post(
        "/admin/controlplane/kyma/",
        {"action": "reconcile_now", "_selected_action": [fleet.eu.pk, fleet.us.pk, fleet.eu2.pk]},
    )
    assert bulk.status_code == 302
    assert reconciled(task_queue()) == [fleet.eu2.pk]  # eu-1's reconcile above is still queued (coalesced)

    edit = eu.admin.post(f"/admin/controlplane/kyma/{fleet.us.pk}/edit/", {"name": "us-1", "channel": "fast"})
    assert edit.status_code in (302, 404) and Kyma.objects.get(pk=fleet.us.pk).channel == "regular"


def test_admin_delete_needs_the_scope(fleet, person):
    admin = person("eu-admin", "fleet-admin", EU_ONLY)
    assert admin.admin.post(
        f"/admin/controlplane/kyma/{fleet.us.pk}/delete/", {"post": "yes"}
    ).status_code in (
        302,
        404,
    )
    assert Kyma.objects.filter(pk=fleet.us.pk).exists()
    assert (
        admin.admin.post(f"/admin/controlplane/kyma/{fleet.eu.pk}/delete/", {"post": "yes"}).status_code
        == 302
    )
    assert not Kyma.objects.filter(pk=fleet.eu.pk, deletion_timestamp__isnull=True).exists()


def test_admin_create_outside_the_scope_is_refused_on_the_form(fleet, person):
    eu = person("eu-op", "operator", EU_ONLY)
    form = {
        "namespace": "kcp-system",
        "name": "us-9",
        "runtime_id": "rt-us-9",
        "channel": "regular",
        "modules": "[]",
        "labels": json.dumps(US),
        "annotations": "{}",
    }
    answer = eu.admin.post("/admin/controlplane/kyma/add/", form)
    assert answer.status_code == 200 and b"outside your scope" in answer.content
    assert not Kyma.objects.filter(name="us-9").exists()
    refused = AuditEntry.objects.get(action="create", outcome="refused", name="us-9")
    assert refused.actor == "eu-op" and "outside your scope" in refused.reason
    assert (
        eu.admin.post(
            "/admin/controlplane/kyma/add/",
            {**form, "name": "eu-9", "runtime_id": "rt-eu-9", "labels": json.dumps(EU)},
        ).status_code
        == 302
    )
    assert Kyma.objects.filter(name="eu-9").exists()


# --- dashboard --------------------------------------------------------------------------------


def test_dashboard_counts_only_the_scope(fleet, person):
    eu = person("eu-viewer", "viewer", EU_ONLY)
    page = eu.admin.get("/admin/fleet/")
    assert page.status_code == 200
    assert page.context["overview"].kymas == 2 and b"kyma-project.io/region=eu-west-1" in page.content
    everyone = person("sre", "viewer")
    assert everyone.admin.get("/admin/fleet/").context["overview"].kymas == 3


# --- API --------------------------------------------------------------------------------------


def test_api_reads_hold_only_the_scope(fleet, person):
    eu = person("eu-viewer", "viewer", EU_ONLY)
    assert names(eu.api.get("/api/v1/kymas/")) == {"eu-1", "eu-2"}
    assert eu.api.get("/api/v1/kymas/kcp-system/eu-1/").status_code == 200
    assert eu.api.get("/api/v1/kymas/kcp-system/us-1/").status_code == 404
    assert eu.api.get(f"/api/v1/kymas/{fleet.us.uid}/").status_code == 404


def test_api_writes_reach_only_the_scope(fleet, person, task_queue):
    eu = person("eu-op", "operator", EU_ONLY)
    task_queue()
    assert eu.api.post("/api/v1/kymas/kcp-system/us-1/reconcile/").status_code == 404
    assert eu.api.post("/api/v1/kymas/kcp-system/eu-1/reconcile/").status_code == 202
    everything = eu.api.post("/api/v1/kymas/reconcile/?all=true")
    assert everything.status_code == 202 and everything.json()["selected"] == 2
    assert set(reconciled(task_queue())) == {fleet.eu.pk, fleet.eu2.pk}

    assert (
        eu.api.put("/api/v1/kymas/kcp-system/us-1/", kyma_doc("us-1", US), format="json").status_code == 404
    )
    moved = eu.api.put("/api/v1/kymas/kcp-system/eu-1/", kyma_doc("eu-1", US), format="json")
    assert moved.status_code == 403 and "outside your scope" in moved.json()["detail"]
    assert Kyma.objects.get(pk=fleet.eu.pk).labels == EU
    assert eu.api.post("/api/v1/kymas/", kyma_doc("us-2", US), format="json").status_code == 403
    assert eu.api.post("/api/v1/kymas/", kyma_doc("eu-3", EU), format="json").status_code == 201
    refused = AuditEntry.objects.filter(actor="eu-op", outcome="refused", name="us-2")
    assert refused.exists()


def test_api_delete_needs_the_scope(fleet, person):
    admin = person("eu-admin", "fleet-admin", EU_ONLY)
    assert admin.api.delete("/api/v1/kymas/kcp-system/us-1/").status_code == 404
    assert admin.api.delete("/api/v1/kymas/kcp-system/eu-1/").status_code in (202, 204)
    assert Kyma.objects.filter(pk=fleet.us.pk, deletion_timestamp__isnull=True).exists()


def test_yaml_apply_is_all_or_nothing_within_the_scope(fleet, person):
    eu = person("eu-op", "operator", EU_ONLY)
    both = eu.api.post("/api/v1/apply/", [kyma_doc("eu-5", EU), kyma_doc("us-5", US)], format="json")
    assert both.status_code == 403 and "us-5" in both.json()["detail"]
    assert not Kyma.objects.filter(name__in=["eu-5", "us-5"]).exists()
    assert eu.api.post("/api/v1/apply/", [kyma_doc("eu-5", EU)], format="json").status_code == 200


def test_a_watch_streams_only_the_scopes_moduleconfigs(fleet, person):
    """Through a real web process (the watch's hub thread lives there, as in production)."""
    module = ModuleFactory(name="keda")
    for kyma in (fleet.eu, fleet.us):
        module_services.moduleconfig_upsert(
            kyma=kyma, module=module, spec={"replicas": 1}, source_generation=1, source_resource_version=""
        )
    eu = person("eu-viewer", "viewer", EU_ONLY)
    key = eu.api._credentials["HTTP_AUTHORIZATION"]
    proc, url = start_web()
    try:
        answer = requests.get(
            f"{url}/api/v1/moduleconfigs/?watch=true&timeoutSeconds=1",
            headers={"Authorization": key},
            timeout=60,
        )
    finally:
        proc.stop()
    lines = [json.loads(line) for line in answer.content.splitlines() if line]
    changed = {line["object"]["metadata"]["name"] for line in lines if line["type"] != "BOOKMARK"}
    assert answer.status_code == 200 and changed == {"eu-1-keda"}
    assert names(eu.api.get("/api/v1/moduleconfigs/")) == {"eu-1-keda"}


def test_events_and_audit_entries_hold_only_the_scope(fleet, person):
    now = timezone.now()
    for kyma in (fleet.eu, fleet.us):
        WatchEventRecord.objects.create(kyma=kyma, component="lifecycle-manager", received_at=now)
        AuditEntry.objects.create(
            actor="someone", action="update", kind="Kyma", name=kyma.name, kyma_id=kyma.pk
        )
    AuditEntry.objects.create(actor="someone", action="update", kind="Module", name="keda")
    auditor = person("eu-auditor", "auditor", EU_ONLY)
    events = auditor.api.get("/api/v1/events/")
    assert events.status_code == 200
    assert {e.get("kyma", {}).get("name", e.get("kyma")) for e in events.json()["results"]} <= {
        "eu-1",
        "kcp-system/eu-1",
    }
    trail = auditor.api.get("/api/v1/audit/")
    assert trail.status_code == 200 and {e["name"] for e in trail.json()["results"]} == {"eu-1"}
    listed = auditor.admin.get("/admin/kernel/auditentry/")
    assert listed.status_code == 200 and b"us-1" not in listed.content and b"keda" not in listed.content
    assert person("eu-op", "operator", EU_ONLY).api.get("/api/v1/audit/").status_code == 403
    assert {
        e["name"] for e in person("all-auditor", "auditor").api.get("/api/v1/audit/").json()["results"]
    } >= {
        "eu-1",
        "us-1",
        "keda",
    }


# --- rollouts ---------------------------------------------------------------------------------


def rollout_doc(name: str, selector: dict | None) -> dict:
    change = {"kind": "KymaSpec", "channel": "fast"}
    if selector is not None:
        change["selector"] = selector
    return {
        "apiVersion": "controlplane.kyma-project.io/v1alpha1",
        "kind": "Rollout",
        "metadata": {"name": name},
        "spec": {"change": change},
    }


def halted_rollout(name: str, kymas: list[Kyma]) -> Rollout:
    rollout = Rollout.objects.create(
        name=name, kind=RolloutKind.KYMA_SPEC, subject=f"kymas:{name}", state=RolloutState.PAUSED, paused=True
    )
    for kyma in kymas:
        RolloutTarget.objects.create(rollout=rollout, kyma=kyma, wave=0)
    return rollout


def test_a_rollout_starts_only_when_the_scope_covers_every_runtime_it_reaches(fleet, person):
    eu = person("eu-op", "operator", EU_ONLY)
    everywhere = eu.api.post("/api/v1/rollouts/", rollout_doc("all-fast", None), format="json")
    assert everywhere.status_code == 403 and "us-1" in everywhere.json()["detail"]
    assert not Rollout.objects.filter(name="all-fast").exists()
    in_scope = eu.api.post("/api/v1/rollouts/", rollout_doc("eu-fast", EU_ONLY), format="json")
    assert in_scope.status_code == 201, in_scope.content


def test_a_rollout_resumes_only_when_the_scope_covers_every_runtime_it_reaches(fleet, person):
    eu = person("eu-op", "operator", EU_ONLY)
    mixed = halted_rollout("mixed", [fleet.eu, fleet.us])
    mine = halted_rollout("mine", [fleet.eu, fleet.eu2])
    assert eu.api.post(f"/api/v1/rollouts/{mixed.name}/resume/").status_code == 403
    assert eu.admin.post(f"/admin/controlplane/rollout/{mixed.pk}/do/resume/").status_code == 403
    assert Rollout.objects.get(pk=mixed.pk).paused
    assert eu.api.post(f"/api/v1/rollouts/{mine.name}/resume/").status_code == 200
    assert not Rollout.objects.get(pk=mine.pk).paused


# --- a viewer writes nowhere ------------------------------------------------------------------


def test_a_viewer_cannot_write_anywhere(fleet, person, task_queue):
    viewer = person("viewer", "viewer")  # every runtime, but only to look
    task_queue()
    rollout = halted_rollout("r", [fleet.eu])
    writes = {
        "admin reconcile": viewer.admin.post(
            f"/admin/controlplane/kyma/{fleet.eu.pk}/reconcile/"
        ).status_code,
        "admin bulk": viewer.admin.post(
            "/admin/controlplane/kyma/", {"action": "reconcile_now", "_selected_action": [fleet.eu.pk]}
        ).status_code,
        "admin delete": viewer.admin.post(
            f"/admin/controlplane/kyma/{fleet.eu.pk}/delete/", {"post": "yes"}
        ).status_code,
        "admin rollout": viewer.admin.post(
            f"/admin/controlplane/rollout/{rollout.pk}/do/resume/"
        ).status_code,
        "api put": viewer.api.put(
            "/api/v1/kymas/kcp-system/eu-1/", kyma_doc("eu-1", EU), format="json"
        ).status_code,
        "api delete": viewer.api.delete("/api/v1/kymas/kcp-system/eu-1/").status_code,
        "api reconcile": viewer.api.post("/api/v1/kymas/kcp-system/eu-1/reconcile/").status_code,
        "api all": viewer.api.post("/api/v1/kymas/reconcile/?all=true").status_code,
        "api create": viewer.api.post("/api/v1/kymas/", kyma_doc("eu-7", EU), format="json").status_code,
        "apply": viewer.api.post("/api/v1/apply/", [kyma_doc("eu-7", EU)], format="json").status_code,
        "rollout": viewer.api.post(f"/api/v1/rollouts/{rollout.name}/resume/").status_code,
        "binding": viewer.api.post(
            "/api/v1/fleetrolebindings/",
            {
                "apiVersion": "access.kyma-controlplane.io/v1alpha1",
                "kind": "FleetRoleBinding",
                "metadata": {"name": "me"},
                "spec": {"role": "fleet-admin", "users": ["viewer"]},
            },
            format="json",
        ).status_code,
    }
    # The admin offers a viewer no bulk action: the list comes back (200) with nothing done.
    assert {door: code for door, code in writes.items() if code != 403} == {"admin bulk": 200}
    assert reconciled(task_queue()) == [] and not Kyma.objects.filter(name="eu-7").exists()
    assert (
        Kyma.objects.get(pk=fleet.eu.pk).deletion_timestamp is None
        and Rollout.objects.get(pk=rollout.pk).paused
    )
    refused_admin = AuditEntry.objects.filter(actor="viewer", via="admin", outcome="refused")
    assert {e.action for e in refused_admin} >= {"reconcile", "delete", "resume"}
