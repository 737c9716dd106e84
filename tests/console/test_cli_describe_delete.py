"""``manage.py describe`` and ``manage.py delete``, as an operator at a terminal runs them."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from fleet.models import Kyma, ReconcileRecord
from tests.factories import KymaFactory, ModuleFactory

pytestmark = pytest.mark.django_db


def run(*args: str) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def test_given_a_kyma_with_conditions_and_reconciles_when_described_then_all_are_shown():
    kyma = KymaFactory(
        name="shop",
        state="Error",
        conditions=[
            {
                "type": "Runtime",
                "status": "False",
                "reason": "Unreachable",
                "message": "connection refused",
                "lastTransitionTime": "2024-01-01T00:00:00Z",
            }
        ],
    )
    ReconcileRecord.objects.create(
        kyma=kyma, started_at=timezone.now(), duration_ms=42, state="Error", message="connection refused"
    )
    text = run("describe", "kymas", "kcp-system/shop")
    assert "Name:         shop" in text and "Namespace:    kcp-system" in text
    assert "State:        Error" in text
    assert "Conditions:" in text and "Unreachable" in text and "connection refused" in text
    assert "Reconciles:" in text and "42 ms" in text
    assert "Events:       <none>" in text
    assert "Spec:" in text and "channel: regular" in text


def test_given_a_module_when_described_by_name_then_shown_without_events():
    ModuleFactory(name="keda")
    text = run("describe", "module", "keda")
    assert "Name:         keda" in text and "Events" not in text


def test_given_an_unknown_object_when_described_then_a_clear_error():
    with pytest.raises(CommandError, match='kymas "kcp-system/nope" not found'):
        run("describe", "kymas", "kcp-system/nope")
    with pytest.raises(CommandError, match="unknown resource type 'pods'"):
        run("describe", "pods", "a/b")


def test_given_a_kyma_without_finalizers_when_deleted_then_gone_at_once():
    KymaFactory(name="old")
    assert run("delete", "kymas", "kcp-system/old", "--wait") == "kyma/old deleted\n"
    assert not Kyma.objects.filter(name="old").exists()


def test_given_a_kyma_with_a_finalizer_when_deleted_then_deleting_and_wait_names_its_state():
    kyma = KymaFactory(name="busy", finalizers=["operator.kyma-project.io/kyma-lifecycle-manager"])
    assert "kyma/busy deleting" in run("delete", "kyma", "kcp-system/busy")
    assert Kyma.objects.get(pk=kyma.pk).state == "Deleting"
    with pytest.raises(CommandError, match=r"kyma/busy not gone after 0 s \(state: Deleting\)"):
        run("delete", "kyma", "kcp-system/busy", "--wait", "--timeout", "0")


@pytest.mark.parametrize("timeout", ["nan", "inf", "-1", "1e999", "soon"])
def test_given_a_timeout_no_wait_can_end_then_one_line_error_before_anything_is_deleted(timeout):
    kyma = KymaFactory(name="busy", finalizers=["operator.kyma-project.io/kyma-lifecycle-manager"])

    with pytest.raises(
        CommandError, match=r"--timeout: .* is not a number of seconds \(finite, 0 or more\)$"
    ):
        run("delete", "kyma", "kcp-system/busy", "--wait", "--timeout", timeout)

    assert Kyma.objects.get(pk=kyma.pk).state != "Deleting"


def test_given_a_module_when_deleted_then_gone():
    ModuleFactory(name="keda")
    assert run("delete", "modules", "keda") == "module/keda deleted\n"


def test_given_a_moduleconfig_when_deleted_then_refused():
    with pytest.raises(CommandError, match="moduleconfigs cannot be deleted on their own"):
        run("delete", "moduleconfigs", "kcp-system/x")
