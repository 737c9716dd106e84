"""Every interface of rollouts calls the same services: documents (apply by hand, get), the API
(list, get, the operator's actions), ``manage.py rollout``. Bad input is a precise 4xx or a
one-line command error."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import yaml
from django.core.management import call_command
from django.core.management.base import CommandError

from fleet.models import (
    Kyma,
    Module,
    Rollout,
    RolloutState,
    RolloutTarget,
    RuntimeWatcherSettings,
    TargetState,
)
from fleet.rollouts.engine import rollouts_advance
from kernel.documents.registry import DocumentsInvalid, apply_documents
from tests.factories import KymaFactory, ModuleFactory

pytestmark = pytest.mark.django_db
WAVES = [{"name": "first", "size": 2}, {"size": "100%"}]


def run(*args: str) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


@pytest.fixture
def fleet():
    ModuleFactory(name="keda", channels={"regular": "1.0.0", "fast": "1.1.0"})
    kymas = [
        KymaFactory(name=f"rt-{n}", modules=[{"name": "keda"}], labels={"plan": "trial" if n < 3 else "paid"})
        for n in range(5)
    ]
    Kyma.objects.update(state="Ready")
    return kymas


def rollout_doc(name: str = "keda-120", **change: object) -> dict:
    change = change or {"kind": "ModuleVersion", "module": "keda", "channel": "regular", "version": "1.2.0"}
    return {
        "apiVersion": "controlplane.kyma-project.io/v1alpha1",
        "kind": "Rollout",
        "metadata": {"name": name},
        "spec": {"change": change, "waves": WAVES, "gate": {"timeoutSeconds": 300}},
    }


def test_given_a_rollout_applied_by_hand_then_the_catalog_changes_and_it_goes_in_its_own_waves(
    fleet, tmp_path
):
    path = tmp_path / "rollout.yaml"
    path.write_text(yaml.safe_dump(rollout_doc()))
    assert run("apply", "-f", str(path)).strip() == "rollout.controlplane.kyma-project.io/keda-120 created"
    rollout = Rollout.objects.get(name="keda-120")
    assert not rollout.automatic and rollout.waves == WAVES and rollout.gate["timeoutSeconds"] == 300
    assert Module.objects.get(name="keda").channels["regular"] == "1.2.0"
    assert RolloutTarget.objects.filter(rollout=rollout, state=TargetState.PROGRESSING).count() == 2
    exported = run("get", "rollouts", "keda-120", "-o", "yaml")
    doc = yaml.safe_load(exported)
    assert doc["status"]["state"] == "Progressing" and doc["status"]["createdBy"] == "hand"
    assert doc["status"]["waves"][0] == {"name": "first", "runtimes": 2, "counts": {"Progressing": 2}}
    path.write_text(exported)
    assert run("apply", "-f", str(path)).strip().endswith("unchanged")
    assert "keda-120" in run("get", "rollouts")


def test_given_spec_paused_then_applying_the_document_pauses_and_resumes(fleet):
    apply_documents([rollout_doc()])
    paused = {**rollout_doc(), "spec": {**rollout_doc()["spec"], "paused": True}}
    apply_documents([paused])
    assert Rollout.objects.get(name="keda-120").state == RolloutState.PAUSED
    apply_documents([rollout_doc()])
    assert Rollout.objects.get(name="keda-120").state == RolloutState.PROGRESSING


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (
            {"kind": "ModuleVersion", "module": "nope", "channel": "regular", "version": "1.2.0"},
            "spec.change.module",
        ),
        (
            {"kind": "ModuleVersion", "module": "keda", "channel": "regular", "version": "1.2"},
            "spec.change.version",
        ),
        (
            {"kind": "ModuleVersion", "module": "keda", "channel": "regular", "version": "1.0.0"},
            "spec.change.version",
        ),
        ({"kind": "Watcher"}, "spec.change.kind"),
        ({"kind": "Teleport"}, "spec.change.kind"),
        ({"kind": "KymaSpec", "selector": {}}, "spec.change"),
        ({"kind": "KymaSpec", "selector": {}, "channel": "Fast"}, "spec.change.channel"),
        ({"kind": "RuntimeWatcher", "image": ""}, "spec.change.image"),
    ],
)
def test_given_a_wrong_change_then_nothing_is_applied_and_the_error_names_the_field(fleet, change, field):
    with pytest.raises(DocumentsInvalid) as failure:
        apply_documents([rollout_doc(**change)])
    assert any(path == f"documents[0].{field}" for path, _ in failure.value.errors), failure.value.errors
    assert not Rollout.objects.exists()
    assert Module.objects.get(name="keda").channels["regular"] == "1.0.0"


def test_given_an_existing_rollout_then_its_waves_cannot_change(fleet):
    apply_documents([rollout_doc()])
    changed = rollout_doc()
    changed["spec"]["waves"] = [{"size": "100%"}]
    with pytest.raises(DocumentsInvalid) as failure:
        apply_documents([changed])
    assert (
        "documents[0].spec.waves",
        "the waves of a rollout under way cannot change",
    ) in failure.value.errors


def test_given_a_kyma_spec_change_by_hand_then_its_waves_edit_the_selected_kymas(fleet):
    change = {"kind": "KymaSpec", "selector": {"matchLabels": {"plan": "trial"}}, "channel": "fast"}
    [result] = apply_documents([rollout_doc("trials-to-fast", **change)])
    rollout = result.obj
    assert rollout.runtimes == 3
    released = set(
        RolloutTarget.objects.filter(rollout=rollout, state=TargetState.PROGRESSING).values_list(
            "kyma__name", flat=True
        )
    )
    assert len(released) == 2
    channels = dict(Kyma.objects.values_list("name", "channel"))
    assert {name for name, channel in channels.items() if channel == "fast"} == released
    from fleet.rollouts.services import rollout_rollback

    rollout_rollback(rollout=rollout)
    assert set(Kyma.objects.values_list("channel", flat=True)) == {"regular"}


def test_given_runtime_watcher_settings_by_hand_then_they_are_recorded_and_rolled_out(fleet):
    [result] = apply_documents(
        [rollout_doc("watcher-020", kind="RuntimeWatcher", image="example.com/watcher:0.2.0")]
    )
    rollout = result.obj
    assert rollout.kind == "RuntimeWatcher" and rollout.runtimes == 5
    new = RuntimeWatcherSettings.objects.get(digest=rollout.to_value["value"])
    assert new.settings["image"] == "example.com/watcher:0.2.0"
    released = Kyma.objects.filter(watcher_settings=new.digest).count()
    assert released == 2


class TestApi:
    def test_the_operators_actions_answer_the_document_or_409(self, fleet, api):
        apply_documents([rollout_doc()])
        base = "/api/v1/rollouts/keda-120"
        assert api.get("/api/v1/rollouts/").json()["count"] == 1
        assert api.get(f"{base}/").json()["status"]["state"] == "Progressing"
        assert api.post(f"{base}/pause/").json()["status"]["state"] == "Paused"
        assert api.post(f"{base}/resume/").json()["status"]["state"] == "Progressing"
        assert api.post(f"{base}/abort/").json()["status"]["state"] == "Aborted"
        refused = api.post(f"{base}/pause/")
        assert refused.status_code == 409
        assert refused.json()["detail"] == "rollout keda-120 is Aborted: it cannot be paused"
        assert api.post(f"{base}/rollback/").json()["status"]["state"] == "RolledBack"
        assert api.delete(f"{base}/").status_code == 409

    def test_without_the_change_permission_the_actions_are_refused(self, fleet, user_with):
        apply_documents([rollout_doc()])
        client = user_with("controlplane.view_rollout")
        assert client.get("/api/v1/rollouts/keda-120/").status_code == 200
        answer = client.post("/api/v1/rollouts/keda-120/abort/")
        assert answer.status_code == 403
        assert Rollout.objects.get(name="keda-120").state == RolloutState.PROGRESSING

    def test_a_rollout_applied_through_the_api_is_created(self, fleet, api):
        answer = api.post("/api/v1/rollouts/", rollout_doc(), format="json")
        assert answer.status_code == 201 and answer.json()["spec"]["waves"] == WAVES
        bad = api.post(
            "/api/v1/rollouts/", rollout_doc("x", kind="ModuleVersion", module="keda"), format="json"
        )
        assert bad.status_code == 400
        assert bad.json()["errors"][0]["field"].startswith("spec.change")

    def test_the_list_filters_by_state(self, fleet, api):
        apply_documents([rollout_doc()])
        assert api.get("/api/v1/rollouts/?state=Halted").json()["count"] == 0
        assert api.get("/api/v1/rollouts/?state=Progressing").json()["count"] == 1


class TestCommand:
    def test_status_lists_then_shows_one_rollout(self, fleet):
        apply_documents([rollout_doc()])
        listing = run("rollout", "status")
        assert "keda-120" in listing and "Progressing" in listing
        shown = run("rollout", "status", "keda-120")
        assert "Change:    module keda in channel regular: 1.0.0 → 1.2.0" in shown
        assert "Gate:      wave 1/2 (first): 0 Ready, 0 failed of 2 counted" in shown
        assert "created by hand" in shown and "wave-started" in shown

    def test_the_actions_print_the_new_state_and_a_refusal_is_one_line(self, fleet):
        apply_documents([rollout_doc()])
        assert run("rollout", "pause", "keda-120").startswith("rollout keda-120: Paused")
        assert run("rollout", "abort", "keda-120").startswith("rollout keda-120: Aborted")
        with pytest.raises(CommandError, match="rollout keda-120 is Aborted: it cannot be resumed"):
            run("rollout", "resume", "keda-120")
        with pytest.raises(CommandError, match='rollout "nope" not found'):
            run("rollout", "status", "nope")


def test_an_automatic_rollout_of_a_module_version_shows_in_get(fleet):
    keda = Module.objects.get(name="keda")
    keda.channels = {**keda.channels, "regular": "1.1.0"}
    from fleet.services import modules as module_services

    module_services.module_save(module=keda)
    rollouts_advance()
    assert "keda-regular-1.1.0" in run("get", "rollouts")
    assert Path  # (the file fixture is only used by the first test)
