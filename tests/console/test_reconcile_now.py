"""Reconcile now: one service for the admin action and the API, with one job threshold."""

from __future__ import annotations

import pytest

from fleet.jobs import services as job_services
from fleet.models import Job, JobKind, Kyma
from tests.factories import KymaFactory

# Requests made inside a transaction wait for its commit: these tests commit like the web role.
pytestmark = pytest.mark.django_db(transaction=True)

RECONCILE_TASK = "controlplane.kyma_reconcile"
URL = "/api/v1/kymas/reconcile/"


def reconciled(queued) -> list[int]:
    return sorted(task.args[0] for task in queued if task.name == RECONCILE_TASK)


def test_given_a_filter_when_the_api_reconciles_the_selection_then_only_those_are_queued(api, task_queue):
    chosen = KymaFactory.create_batch(2, state="Ready")
    KymaFactory(state="Error")
    task_queue()

    response = api.post(f"{URL}?state=Ready")

    assert response.status_code == 202, response.content
    assert response.json() == {"selected": 2, "queued": 2, "covered": 0}
    assert reconciled(task_queue()) == sorted(k.pk for k in chosen)


def test_given_no_filter_then_the_api_refuses_unless_all_is_asked_for(api, task_queue):
    KymaFactory.create_batch(3)
    task_queue()

    refused = api.post(URL)
    everything = api.post(f"{URL}?all=true")

    assert refused.status_code == 400
    assert refused.json()["errors"] == [{"field": "all", "reason": "required without a filter"}]
    assert everything.status_code == 202 and everything.json()["queued"] == 3
    assert len(reconciled(task_queue())) == 3


def test_given_a_selection_over_the_threshold_then_api_and_admin_both_make_a_job(
    api, admin_client, task_queue, monkeypatch
):
    monkeypatch.setattr(job_services, "RECONCILE_JOB_THRESHOLD", 2)
    kymas = KymaFactory.create_batch(3)
    task_queue()

    from_api = api.post(f"{URL}?all=true")
    from_admin = admin_client.post(
        "/admin/controlplane/kyma/",
        {"action": "reconcile_now", "_selected_action": [k.pk for k in kymas]},
    )

    jobs = list(Job.objects.filter(kind=JobKind.RECONCILE).order_by("pk"))
    assert from_api.status_code == 202 and from_api.json()["job"] == jobs[0].pk
    assert from_admin.status_code == 302 and from_admin.url.endswith(
        f"/admin/controlplane/job/{jobs[1].pk}/change/"
    )
    assert [sorted(job.targets["kyma_ids"]) for job in jobs] == [sorted(k.pk for k in kymas)] * 2
    assert reconciled(task_queue()) == []  # the jobs queue them, batch by batch


def test_given_a_user_without_the_change_permission_then_403(client, django_user_model):
    user = django_user_model.objects.create_user("viewer", password="pw-123456789", is_staff=True)
    client.force_login(user)

    assert client.post(f"{URL}?all=true").status_code == 403
    assert Kyma.objects.count() == 0
