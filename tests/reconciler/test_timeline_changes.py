"""What a reconcile records for the Kyma's timeline: why it ran and, field by field, what changed."""

from __future__ import annotations

import pytest

from fleet.models import Kyma, ReconcileRecord
from fleet.models.records import describe_change, reason_label
from pki import services as pki
from reconciler.run import kyma_reconcile_run
from tests.support.runtimes import connected_kyma, keda_module, klm_watcher

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def catalog():
    pki.ca_bootstrap()
    klm_watcher()
    return keda_module()


def reconcile(kyma: Kyma, reason: str = "periodic") -> ReconcileRecord:
    kyma_reconcile_run(kyma.pk, reason=reason)
    kyma.refresh_from_db()
    return ReconcileRecord.objects.filter(kyma_id=kyma.pk).order_by("-id").first()


def test_given_a_new_kyma_when_reconciled_then_the_record_lists_what_was_created_and_why(runtimes):
    kyma = connected_kyma(runtimes())
    record = reconcile(kyma, reason="requested by a user")

    lines = record.change_lines()
    assert record.reason == "requested by a user" and record.reason_text == "user request"
    assert "Kyma kyma-system/default created" in lines
    assert "Deployment kyma-system/skr-webhook created" in lines
    assert "Keda kyma-system/default created (module keda)" in lines
    assert any(line.startswith("module keda: ∅ → ") for line in lines)


def test_given_nothing_changed_when_reconciled_again_then_the_record_lists_nothing(runtimes):
    kyma = connected_kyma(runtimes())
    reconcile(kyma)
    reconcile(kyma)  # the watcher became ready: its state may move once
    record = reconcile(kyma, reason="watch-event")
    assert record.changes == []
    assert record.reason_text == "event from the runtime"


def test_given_a_user_edit_in_the_runtime_when_adopted_then_field_level_before_and_after(runtimes):
    runtime = runtimes()
    kyma = connected_kyma(runtime)
    reconcile(kyma)

    def edit(obj: dict) -> None:
        obj["spec"]["channel"] = "fast"
        obj["spec"]["modules"] = [{"name": "keda", "channel": "regular"}, {"name": "serverless"}]

    runtime.edit_as_user("Kyma", "default", edit, "kyma-system")
    record = reconcile(kyma, reason="watch-event")

    lines = record.change_lines()
    assert "channel regular → fast (made in the runtime)" in lines
    assert "module serverless added (made in the runtime)" in lines
    assert "modules[keda].channel ∅ → regular (made in the runtime)" in lines
    assert "adopted spec changes made in the runtime: channel regular → fast" in record.message
    assert "module serverless: ∅ → Error" in lines  # not in the catalog


def test_given_a_module_removed_in_the_runtime_then_removed_and_its_resource_deleted(runtimes):
    runtime = runtimes()
    kyma = connected_kyma(runtime)
    reconcile(kyma)
    runtime.edit_as_user("Kyma", "default", lambda obj: obj["spec"].update(modules=[]), "kyma-system")
    lines = reconcile(kyma, reason="watch-event").change_lines()
    assert "module keda removed (made in the runtime)" in lines
    assert "Keda kyma-system/default deleted" in lines


@pytest.mark.parametrize(
    ("change", "sentence"),
    [
        (
            {"kind": "spec", "field": "channel", "before": "regular", "after": "fast"},
            "channel regular → fast",
        ),
        (
            {"kind": "module-state", "module": "keda", "before": "Processing", "after": "Ready"},
            "module keda: Processing → Ready",
        ),
        (
            {"kind": "applied", "resource": "Secret kyma-system/skr-webhook-tls", "action": "corrected"},
            "Secret kyma-system/skr-webhook-tls corrected",
        ),
        (
            {"kind": "drift", "text": "Deployment skr-webhook put back (replicas 0 → 1)"},
            "Deployment skr-webhook put back (replicas 0 → 1)",
        ),
        (
            {"kind": "drift", "object": "Service skr-webhook", "field": "port"},
            "drift: object=Service skr-webhook, field=port",
        ),
    ],
)
def test_given_any_structured_change_then_it_reads_as_one_sentence(change, sentence):
    assert describe_change(change) == sentence


def test_given_request_reasons_then_an_operator_reads_why():
    assert reason_label("periodic") == "periodic"
    assert reason_label("job 7") == "user request (job 7)"
    assert reason_label("") == "unknown"
    assert reason_label("CA rotated") == "CA rotated"
