"""Who steered a rollout: pause, resume, abort and roll back from every door (the admin's buttons,
the API, ``manage.py rollout``, a document's ``spec.paused``) are audit entries with the actor and
the state moved from and to, shown on the rollout's History; a refused action is recorded with
its reason; deleting a finished rollout's record is recorded; the engine's own moves are not."""

from __future__ import annotations

import io

import pytest
import yaml
from django.core.management import call_command
from django.core.management.base import CommandError
from django.urls import reverse

from fleet.models import Kyma, Rollout, RolloutState
from fleet.rollouts import services as rollout_services
from kernel.documents.registry import apply_documents
from kernel.models import AuditEntry
from tests.factories import KymaFactory, ModuleFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def rollout() -> Rollout:
    ModuleFactory(name="keda", channels={"regular": "1.0.0"})
    KymaFactory.create_batch(4, modules=[{"name": "keda"}])
    Kyma.objects.update(state="Ready")
    apply_documents([rollout_doc()])  # no door acting: not recorded
    return Rollout.objects.get(name="keda-120")


def rollout_doc(**spec: object) -> dict:
    return {
        "apiVersion": "controlplane.kyma-project.io/v1alpha1",
        "kind": "Rollout",
        "metadata": {"name": "keda-120"},
        "spec": {
            "change": {"kind": "ModuleVersion", "module": "keda", "channel": "regular", "version": "1.2.0"},
            "waves": [{"name": "first", "size": 1}, {"size": "100%"}],
            **spec,
        },
    }


def steps() -> list[tuple[str, str, str, str]]:
    """(action, via, state before, state after) of each rollout entry, oldest first."""
    return [
        (e.action, e.via, e.changes[0]["before"], e.changes[0]["after"])
        for e in AuditEntry.objects.filter(kind="Rollout", outcome="done").order_by("id")
    ]


def test_given_the_api_steers_a_rollout_then_each_action_is_recorded_as_the_token_user(api, rollout):
    base = "/api/v1/rollouts/keda-120"
    for action in ("pause", "resume", "abort", "rollback"):
        assert api.post(f"{base}/{action}/").status_code == 200

    assert steps() == [
        ("pause", "api", "Progressing", "Paused"),
        ("resume", "api", "Paused", "Progressing"),
        ("abort", "api", "Progressing", "Aborted"),
        ("rollback", "api", "Aborted", "RolledBack"),
    ]
    entry = AuditEntry.objects.filter(kind="Rollout").first()
    assert (entry.actor, entry.credential, entry.name, entry.uid) == (
        "root",
        "legacy token",
        "keda-120",
        str(rollout.uid),
    )
    assert entry.request == "POST /api/v1/rollouts/keda-120/rollback/"


def test_given_an_api_action_the_state_refuses_then_a_refused_entry_names_the_action(api, rollout):
    api.post("/api/v1/rollouts/keda-120/abort/")

    assert api.post("/api/v1/rollouts/keda-120/pause/").status_code == 409

    refused = AuditEntry.objects.get(outcome="refused")
    assert (refused.action, refused.kind, refused.name) == ("pause", "Rollout", "keda-120")
    assert "it cannot be paused" in refused.reason


def test_given_the_admins_buttons_then_recorded_as_the_admin_and_shown_on_the_history(admin_client, rollout):
    for verb in ("pause", "resume", "abort"):
        admin_client.post(reverse("admin:controlplane_rollout_do", args=[rollout.pk, verb]))
    admin_client.post(reverse("admin:controlplane_rollout_do", args=[rollout.pk, "resume"]))  # refused

    assert steps() == [
        ("pause", "admin", "Progressing", "Paused"),
        ("resume", "admin", "Paused", "Progressing"),
        ("abort", "admin", "Progressing", "Aborted"),
    ]
    assert set(AuditEntry.objects.values_list("actor", flat=True)) == {"root"}
    refused = AuditEntry.objects.get(outcome="refused")
    assert (refused.action, refused.via, refused.uid) == ("resume", "admin", str(rollout.uid))
    history = admin_client.get(
        reverse("admin:controlplane_rollout_history", args=[rollout.pk])
    ).content.decode()
    assert history.count("cp-audit-done") == 3 and history.count("cp-audit-refused") == 1
    page = admin_client.get(reverse("admin:controlplane_rollout_change", args=[rollout.pk])).content.decode()
    assert reverse("admin:controlplane_rollout_history", args=[rollout.pk]) in page


def test_given_manage_py_rollout_then_recorded_as_the_command_and_a_refusal_too(rollout):
    call_command("rollout", "pause", "keda-120", stdout=io.StringIO())
    call_command("rollout", "rollback", "keda-120", stdout=io.StringIO())
    with pytest.raises(CommandError):
        call_command("rollout", "abort", "keda-120", stdout=io.StringIO())

    assert steps() == [
        ("pause", "command", "Progressing", "Paused"),
        ("rollback", "command", "Paused", "RolledBack"),
    ]
    entry = AuditEntry.objects.filter(outcome="done").first()
    assert entry.request == "manage.py rollout rollback keda-120" and entry.actor and entry.source
    refused = AuditEntry.objects.get(outcome="refused")
    assert (refused.action, refused.via, refused.name) == ("abort", "command", "keda-120")


def test_given_a_document_flips_spec_paused_through_apply_then_recorded_as_pause_and_resume(
    rollout, tmp_path
):
    path = tmp_path / "rollout.yaml"
    for paused in (True, False):
        path.write_text(yaml.safe_dump(rollout_doc(paused=paused)))
        call_command("apply", "-f", str(path), stdout=io.StringIO(), stderr=io.StringIO())

    assert steps() == [
        ("pause", "command", "Progressing", "Paused"),
        ("resume", "command", "Paused", "Progressing"),
    ]


def test_given_a_finished_rollouts_record_deleted_through_the_api_then_recorded(api, rollout):
    assert api.delete("/api/v1/rollouts/keda-120/").status_code == 409  # still deciding: refused
    Rollout.objects.filter(pk=rollout.pk).update(state=RolloutState.COMPLETED)

    assert api.delete("/api/v1/rollouts/keda-120/").status_code == 204

    assert not Rollout.objects.exists()
    assert [(e.action, e.outcome) for e in AuditEntry.objects.order_by("id")] == [
        ("delete", "refused"),
        ("delete", "done"),
    ]


def test_given_a_service_call_with_no_door_acting_then_nothing_is_recorded(rollout):
    rollout_services.rollout_pause(rollout=rollout)  # as the engine, beat or a worker would

    assert not AuditEntry.objects.exists()
