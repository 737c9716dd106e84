"""Forgetting a runtime gone for good: one service (``kyma_forget_runtime``) behind the Kyma page's
button, the API's ``forget-runtime`` action and ``manage.py delete --forget-runtime``; deliberate
(only for a Kyma being deleted, with a reason) and recorded in the audit trail. The page of a Kyma
being deleted says when the purge starts."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse

from fleet.models import Kyma
from fleet.models.kyma import KYMA_FINALIZER
from fleet.services import kymas as kyma_services
from kernel.models import AuditEntry
from tests.factories import KymaFactory

pytestmark = pytest.mark.django_db


def deleting(**fields) -> Kyma:
    kyma = KymaFactory(finalizers=[KYMA_FINALIZER], **fields)
    kyma_services.kyma_delete(kyma=kyma)
    kyma.refresh_from_db()
    return kyma


def test_given_a_kyma_being_deleted_when_the_api_forgets_its_runtime_then_it_goes_and_the_trail_says_why(api):
    kyma = deleting()

    response = api.post(
        f"/api/v1/kymas/{kyma.uid}/forget-runtime/", {"reason": "cluster destroyed"}, format="json"
    )

    assert response.status_code == 200, response.content
    assert response.json() == {"deleted": True, "detail": "deleted: its runtime was not cleaned up"}
    assert not Kyma.objects.filter(pk=kyma.pk).exists()
    entry = AuditEntry.objects.get(action="forget-runtime")
    assert (entry.name, entry.reason, entry.via) == (kyma.name, "cluster destroyed", "api")
    assert entry.changes == [{"field": "finalizers", "before": [KYMA_FINALIZER], "after": []}]


def test_given_another_finalizer_when_forgotten_then_only_ours_goes(api):
    kyma = deleting()
    Kyma.objects.filter(pk=kyma.pk).update(finalizers=[KYMA_FINALIZER, "example.com/keep"])

    response = api.post(f"/api/v1/kymas/{kyma.uid}/forget-runtime/")

    assert response.json()["deleted"] is False
    assert Kyma.objects.get(pk=kyma.pk).finalizers == ["example.com/keep"]


def test_given_a_kyma_not_being_deleted_then_the_api_refuses_with_409(api):
    kyma = KymaFactory(finalizers=[KYMA_FINALIZER])

    response = api.post(f"/api/v1/kymas/{kyma.uid}/forget-runtime/")

    assert response.status_code == 409
    assert "delete it first" in response.json()["detail"]
    assert Kyma.objects.filter(pk=kyma.pk).exists()


def test_given_no_delete_permission_then_the_api_refuses_with_403(user_with):
    kyma = deleting()

    response = user_with("controlplane.view_kyma", "controlplane.change_kyma").post(
        f"/api/v1/kymas/{kyma.uid}/forget-runtime/"
    )

    assert response.status_code == 403
    assert Kyma.objects.filter(pk=kyma.pk).exists()


def test_given_a_bad_reason_then_a_400(api):
    kyma = deleting()
    response = api.post(f"/api/v1/kymas/{kyma.uid}/forget-runtime/", {"reason": ["x"]}, format="json")
    assert response.status_code == 400


def test_the_page_of_a_kyma_being_deleted_says_when_the_purge_starts_and_offers_to_forget(
    admin_client, settings
):
    settings.KYMA_PURGE_AFTER = 300
    kyma = deleting()

    html = admin_client.get(reverse("admin:controlplane_kyma_change", args=[kyma.pk])).content.decode()

    assert 'id="cp-deleting"' in html and "purged from" in html and "KYMA_PURGE_AFTER" in html
    assert 'id="cp-forget-runtime"' in html


def test_the_page_of_a_kyma_not_being_deleted_offers_nothing_of_it(admin_client):
    kyma = KymaFactory()
    html = admin_client.get(reverse("admin:controlplane_kyma_change", args=[kyma.pk])).content.decode()
    assert 'id="cp-forget-runtime"' not in html


def test_given_the_pages_button_then_the_kyma_goes_and_the_trail_says_why(admin_client):
    kyma = deleting()

    response = admin_client.post(
        reverse("admin:controlplane_kyma_forget_runtime", args=[kyma.pk]), {"reason": "gone"}
    )

    assert response.status_code == 302
    assert not Kyma.objects.filter(pk=kyma.pk).exists()
    assert AuditEntry.objects.get(action="forget-runtime").via == "admin"


def test_given_the_command_then_the_kyma_goes_and_the_trail_says_why():
    kyma = deleting()
    out = io.StringIO()

    call_command(
        "delete", "kymas", f"{kyma.namespace}/{kyma.name}", "--forget-runtime", "--reason", "gone", stdout=out
    )

    assert "runtime forgotten" in out.getvalue()
    assert not Kyma.objects.filter(pk=kyma.pk).exists()
    assert AuditEntry.objects.get(action="forget-runtime").reason == "gone"


def test_given_the_command_for_a_kyma_not_being_deleted_then_one_line_error():
    kyma = KymaFactory()
    with pytest.raises(CommandError, match="delete it first"):
        call_command("delete", "kymas", f"{kyma.namespace}/{kyma.name}", "--forget-runtime")
