"""Jobs: created by the admin, run by the task in batches, progress and end state on their page.

The task function runs in-process here (no worker); the broker is real, so the reconciles a job
requests can be read back from the queue.
"""

from __future__ import annotations

import datetime as dt
import io

import pytest
from django.conf import settings
from django.contrib.auth.models import Permission
from django.core.management import call_command
from django.urls import reverse
from django.utils import timezone

from fleet.jobs import selectors as job_selectors
from fleet.jobs import services, tasks
from fleet.models import Job, JobKind, JobStatus, Kyma, ReconcileRecord
from fleet.models.jobs import LOG_MAX_CHARS, LOG_MAX_LINES
from pki import jobs as pki_jobs
from pki import maintenance as pki_maintenance
from pki import services as pki_services
from pki.models import Certificate, CertificateAuthority
from tests.factories import KymaFactory
from tests.support.broker import use_broker

pytestmark = pytest.mark.django_db(transaction=True)

RECONCILE_TASK = "controlplane.kyma_reconcile"


def reconciles(queued) -> list[int]:
    return sorted(task.args[0] for task in queued if task.name == RECONCILE_TASK)


def ids(kymas) -> list[int]:
    return sorted(kyma.pk for kyma in kymas)


class TestReconcileJob:
    def test_given_kymas_when_the_job_runs_then_every_batch_is_requested_and_recorded(
        self, admin_user, task_queue, monkeypatch
    ):
        monkeypatch.setattr(services, "RECONCILE_BATCH", 2)
        kymas = KymaFactory.create_batch(5)
        task_queue()

        job = services.job_reconcile_kymas(kyma_ids=[k.pk for k in kymas], user=admin_user)
        published = task_queue()
        job.refresh_from_db()

        assert [(t.name, t.args) for t in published] == [("jobs.run", [job.pk])]
        assert (job.status, job.total, job.done, job.percent, job.created_by) == (
            "pending",
            5,
            0,
            0,
            admin_user,
        )

        tasks.job_run(job.pk)
        job.refresh_from_db()

        assert job.status == JobStatus.COMPLETED and job.done == 5 and job.percent == 100
        assert job.started_at <= job.finished_at and job.lease_until is None
        assert job.message == "Reconcile queued for 5 Kyma(s); 0 already had one queued."
        assert len(job.log.splitlines()) == 3  # batches of 2, 2 and 1
        assert reconciles(task_queue()) == ids(kymas)

    def test_given_queued_and_deleted_kymas_then_the_end_state_says_so(self, admin_user, task_queue):
        kymas = KymaFactory.create_batch(4)
        from fleet.queue.requests import kyma_reconcile_request

        kyma_reconcile_request([kymas[0].pk], reason="earlier")
        job = services.job_reconcile_kymas(kyma_ids=[k.pk for k in kymas], user=admin_user)
        kymas[1].delete()
        task_queue()

        tasks.job_run(job.pk)
        job.refresh_from_db()

        assert job.result == {"queued": 2, "covered": 1, "gone": 1}
        assert job.message == "Reconcile queued for 2 Kyma(s); 1 already had one queued; 1 no longer exist."
        assert reconciles(task_queue()) == ids(kymas[2:])

    def test_given_a_spent_time_budget_then_the_next_slice_resumes_where_progress_says(
        self, admin_user, task_queue, monkeypatch
    ):
        monkeypatch.setattr(services, "RECONCILE_BATCH", 2)
        kymas = KymaFactory.create_batch(5)
        job = services.job_reconcile_kymas(kyma_ids=[k.pk for k in kymas], user=admin_user)
        task_queue()

        assert services.job_run(job_id=job.pk, budget_seconds=0) == 0.0
        job.refresh_from_db()
        assert (job.status, job.done, job.lease_until) == ("running", 0, None)

        Job.objects.filter(pk=job.pk).update(done=2)  # as if a slice had done the first batch
        assert services.job_run(job_id=job.pk) is None
        job.refresh_from_db()

        assert job.status == "completed" and job.done == 5
        assert reconciles(task_queue()) == ids(kymas[2:])

    def test_given_a_slice_out_of_time_when_the_task_ends_then_it_queues_the_next_slice(
        self, admin_user, task_queue, monkeypatch
    ):
        monkeypatch.setattr(services, "SLICE_SECONDS", 0)
        kyma = KymaFactory()
        job = services.job_reconcile_kymas(kyma_ids=[kyma.pk], user=admin_user)
        task_queue()

        tasks.job_run(job.pk)

        assert [(t.name, t.args) for t in task_queue()] == [("jobs.run", [job.pk])]
        assert Job.objects.get(pk=job.pk).status == JobStatus.RUNNING

    def test_given_a_job_leased_by_another_worker_then_this_one_waits_for_the_lease(
        self, admin_user, task_queue
    ):
        kyma = KymaFactory()
        job = services.job_reconcile_kymas(kyma_ids=[kyma.pk], user=admin_user)
        Job.objects.filter(pk=job.pk).update(
            status=JobStatus.RUNNING, lease_until=timezone.now() + dt.timedelta(seconds=60)
        )
        task_queue()

        again_in = services.job_run(job_id=job.pk)

        assert 50 < again_in <= 60
        assert Job.objects.get(pk=job.pk).done == 0 and task_queue() == []

    def test_given_a_lease_that_ran_out_then_the_job_is_picked_up_again(self, admin_user, task_queue):
        kyma = KymaFactory()
        job = services.job_reconcile_kymas(kyma_ids=[kyma.pk], user=admin_user)
        Job.objects.filter(pk=job.pk).update(
            status=JobStatus.RUNNING, lease_until=timezone.now() - dt.timedelta(seconds=1)
        )
        task_queue()

        assert services.job_run(job_id=job.pk) is None

        assert Job.objects.get(pk=job.pk).status == JobStatus.COMPLETED
        assert reconciles(task_queue()) == [kyma.pk]


class TestFailures:
    def test_given_the_broker_down_while_running_then_the_job_fails_with_the_reason(
        self, admin_user, task_queue
    ):
        kymas = KymaFactory.create_batch(3)
        job = services.job_reconcile_kymas(kyma_ids=[k.pk for k in kymas], user=admin_user)
        task_queue()
        previous = use_broker("redis://127.0.0.1:9/0")
        try:
            tasks.job_run(job.pk)
        finally:
            use_broker(previous)
        job.refresh_from_db()

        assert job.status == JobStatus.FAILED and job.finished_at is not None
        assert "task queue is unavailable" in job.message
        assert job.done == 0 and job.lease_until is None
        assert job.log.splitlines()[-1].endswith(job.message)

    def test_given_the_broker_down_when_a_job_is_created_then_it_is_failed_at_once(
        self, admin_user, broker_down
    ):
        kyma = KymaFactory()

        job = services.job_reconcile_kymas(kyma_ids=[kyma.pk], user=admin_user)
        job.refresh_from_db()

        assert job.status == JobStatus.FAILED and "task queue is unavailable" in job.message

    def test_given_a_bug_in_the_work_then_the_job_still_ends_failed(self):
        job = Job.objects.create(kind="no-such-kind", total=1)

        assert services.job_run(job_id=job.pk) is None

        job.refresh_from_db()
        assert job.status == JobStatus.FAILED and job.message.startswith("unexpected error: KeyError")

    def test_given_nothing_selected_then_no_job(self, admin_user):
        from kernel.errors import ValidationFailed

        with pytest.raises(ValidationFailed):
            services.job_reconcile_kymas(kyma_ids=[], user=admin_user)
        assert not Job.objects.exists()

    def test_given_a_long_log_then_only_the_newest_lines_are_kept(self):
        text = ""
        for number in range(LOG_MAX_LINES * 3):
            text = services.log_append(text, f"line {number} " + "x" * 100)

        assert len(text.splitlines()) <= LOG_MAX_LINES and len(text) <= LOG_MAX_CHARS
        assert f"line {LOG_MAX_LINES * 3 - 1} " in text.splitlines()[-1]


class TestCaRotationJob:
    def test_given_runtime_certificates_when_the_ca_rotates_then_the_job_reissues_them(
        self, admin_user, task_queue, monkeypatch
    ):
        monkeypatch.setattr(pki_jobs, "CERTIFICATE_BATCH", 2)
        pki_services.ca_bootstrap()
        kymas = KymaFactory.create_batch(3)
        without_domain = KymaFactory()
        for kyma in [*kymas, without_domain]:
            pki_services.certificate_for_kyma(kyma=kyma)
        Kyma.objects.filter(pk=without_domain.pk).update(skr_domain="")
        task_queue()

        job = pki_jobs.ca_rotation_start(user=admin_user)
        new_ca = CertificateAuthority.objects.order_by("-joined_bundle_at", "-id").first()

        assert CertificateAuthority.objects.count() == 2  # the rotation itself is immediate
        assert job.kind == JobKind.CA_ROTATE and job.total == 4 and job.result["ca"] == new_ca.fingerprint

        tasks.job_run(job.pk)
        job.refresh_from_db()

        current = dict(
            Certificate.objects.filter(kyma__isnull=False, superseded_at__isnull=True).values_list(
                "kyma_id", "issuer_id"
            )
        )
        assert job.status == JobStatus.COMPLETED and job.done == 4
        assert (job.result["reissued"], job.result["skipped"]) == (3, 1)
        assert all(current[k.pk] == new_ca.pk for k in kymas) and current[without_domain.pk] != new_ca.pk
        assert "3 runtime certificate(s) re-issued, 1 skipped" in job.message
        assert reconciles(task_queue()) == ids([*kymas, without_domain])

    def test_given_the_cli_and_beat_then_they_start_the_same_rotation_job_as_the_admin(self, task_queue):
        pki_services.ca_bootstrap()
        kyma = KymaFactory()
        pki_services.certificate_for_kyma(kyma=kyma)

        call_command("pki", "rotate-ca", "--yes", stdout=io.StringIO())
        due = settings.PKI_CA_VALIDITY_DAYS - settings.PKI_CA_ROTATE_BEFORE_DAYS + 1
        report = pki_maintenance.pki_maintain(now=timezone.now() + dt.timedelta(days=due))

        jobs = list(Job.objects.filter(kind=JobKind.CA_ROTATE).order_by("pk"))
        assert report.ca_rotated
        assert len(jobs) == 2 and all(job.total >= 1 for job in jobs)


class TestAdmin:
    def test_given_more_than_200_selected_when_reconcile_now_then_a_job_and_its_page(
        self, admin_client, admin_user, task_queue
    ):
        kymas = Kyma.objects.bulk_create(KymaFactory.build_batch(201))
        selected = sorted(Kyma.objects.values_list("pk", flat=True))
        task_queue()

        response = admin_client.post(
            reverse("admin:controlplane_kyma_changelist"),
            {"action": "reconcile_now", "_selected_action": selected},
        )
        job = Job.objects.get()

        assert len(kymas) == 201
        assert response.status_code == 302
        assert response["Location"] == reverse("admin:controlplane_job_change", args=[job.pk])
        assert sorted(job.targets["kyma_ids"]) == selected and job.created_by == admin_user
        assert reconciles(task_queue()) == []  # nothing done in the request

        running = admin_client.get(response["Location"]).content.decode()
        assert 'http-equiv="refresh"' in running and "cp-progress" in running

        tasks.job_run(job.pk)
        queued = admin_client.get(response["Location"]).content.decode()

        # Queued is not done: the page follows the reconciles until they ran
        assert 'http-equiv="refresh"' in queued and ">Queued<" in queued
        assert "Reconcile queued for 201 Kyma(s)" in queued
        assert "queued 201 of 201; 201 not reconciled yet" in queued
        assert len(reconciles(task_queue())) == 201

        ran_at = timezone.now()
        ReconcileRecord.objects.bulk_create(
            ReconcileRecord(
                kyma_id=pk, started_at=ran_at, duration_ms=5, state="Error" if pk == selected[0] else "Ready"
            )
            for pk in selected
        )
        finished = admin_client.get(response["Location"]).content.decode()
        assert 'http-equiv="refresh"' not in finished
        assert "reconciled 200 OK, 1 failed" in finished and ">1 failed<" in finished

    def test_given_few_selected_when_reconcile_now_then_queued_at_once_without_a_job(
        self, admin_client, task_queue
    ):
        kymas = KymaFactory.create_batch(3)
        task_queue()

        admin_client.post(
            reverse("admin:controlplane_kyma_changelist"),
            {"action": "reconcile_now", "_selected_action": [k.pk for k in kymas]},
        )

        assert not Job.objects.exists() and reconciles(task_queue()) == ids(kymas)

    def test_given_a_running_job_then_its_page_shows_the_progress(self, admin_client, admin_user):
        job = Job.objects.create(
            kind=JobKind.RECONCILE, status=JobStatus.RUNNING, total=4, done=1, created_by=admin_user,
            started_at=timezone.now(), log="10:00:00 1 Kyma(s): 1 queued",
        )  # fmt: skip

        page = admin_client.get(reverse("admin:controlplane_job_change", args=[job.pk])).content.decode()
        listing = admin_client.get(reverse("admin:controlplane_job_changelist") + "?status__exact=running")

        assert "width:25%" in page and "1 / 4" in page and "1 Kyma(s): 1 queued" in page
        assert listing.status_code == 200 and listing.context["cl"].result_count == 1

    def test_given_the_rotate_page_when_confirmed_then_the_job_page_follows(self, admin_client):
        pki_services.ca_bootstrap()

        response = admin_client.post(reverse("admin:pki_certificateauthority_rotate"))
        job = Job.objects.get()

        assert job.kind == JobKind.CA_ROTATE
        assert response["Location"] == reverse("admin:controlplane_job_change", args=[job.pk])

    def test_given_staff_without_job_permission_then_only_their_own_jobs(
        self, client, admin_user, django_user_model
    ):
        staff = django_user_model.objects.create_user("operator", password="x-123456789", is_staff=True)
        for codename in ("view_kyma", "change_kyma"):
            staff.user_permissions.add(Permission.objects.get(codename=codename))
        client.force_login(staff)
        mine = Job.objects.create(kind=JobKind.RECONCILE, created_by=staff)
        theirs = Job.objects.create(kind=JobKind.RECONCILE, created_by=admin_user)

        assert client.get(reverse("admin:controlplane_job_change", args=[mine.pk])).status_code == 200
        others = client.get(reverse("admin:controlplane_job_change", args=[theirs.pk]))
        assert others.status_code == 302  # "does not exist" for them, back to the index
        listing = client.get(reverse("admin:controlplane_job_changelist"))
        assert [job.pk for job in listing.context["cl"].result_list] == [mine.pk]


class TestJobPages:
    def test_given_a_reconcile_job_then_targets_are_kyma_names_and_no_raw_json(
        self, admin_client, admin_user
    ):
        kymas = [KymaFactory(name=f"named-{n}") for n in range(3)]
        job = Job.objects.create(
            kind=JobKind.RECONCILE, status=JobStatus.COMPLETED, total=3, done=3, created_by=admin_user,
            targets={"kyma_ids": [k.pk for k in kymas]}, result={"queued": 3, "covered": 0, "gone": 0},
            started_at=timezone.now(), finished_at=timezone.now(),
        )  # fmt: skip

        page = admin_client.get(reverse("admin:controlplane_job_change", args=[job.pk])).content.decode()

        assert "kcp-system/named-0" in page and "kcp-system/named-2" in page
        assert '{"queued"' not in page and "&quot;queued&quot;" not in page
        assert "queued 3 of 3; 3 not reconciled yet" in page

    def test_given_reconciles_before_the_job_then_they_do_not_count(self, admin_user):
        kyma = KymaFactory()
        started = timezone.now()
        ReconcileRecord.objects.create(
            kyma=kyma, started_at=started - dt.timedelta(minutes=5), duration_ms=1, state="Ready"
        )
        job = Job.objects.create(
            kind=JobKind.RECONCILE, status=JobStatus.COMPLETED, total=1, done=1, created_by=admin_user,
            targets={"kyma_ids": [kyma.pk]}, result={"queued": 1}, started_at=started, finished_at=started,
        )  # fmt: skip
        outcome = job_selectors.reconcile_outcome(job)
        assert (outcome.pending, outcome.label) == (1, "Queued")

        ReconcileRecord.objects.create(
            kyma=kyma, started_at=started + dt.timedelta(seconds=1), duration_ms=1, state="Ready"
        )
        outcome = job_selectors.reconcile_outcome(job)
        assert (outcome.ok, outcome.failed, outcome.pending, outcome.label) == (1, 0, 0, "Reconciled OK")

    def test_given_jobs_then_the_list_and_the_dashboard_show_the_real_outcome(self, admin_client, admin_user):
        kymas = KymaFactory.create_batch(2)
        now = timezone.now()
        job = Job.objects.create(
            kind=JobKind.RECONCILE, status=JobStatus.COMPLETED, total=2, done=2, created_by=admin_user,
            targets={"kyma_ids": [k.pk for k in kymas]}, result={"queued": 2}, started_at=now,
            finished_at=now,
        )  # fmt: skip
        ReconcileRecord.objects.create(kyma=kymas[0], started_at=now, duration_ms=1, state="Ready")
        ReconcileRecord.objects.create(kyma=kymas[1], started_at=now, duration_ms=1, state="Error")

        listing = admin_client.get(reverse("admin:controlplane_job_changelist")).content.decode()
        dashboard = admin_client.get("/admin/fleet/").content.decode()

        for html in (listing, dashboard):
            assert "reconciled 1 OK, 1 failed" in html and ">1 failed<" in html
            assert ">Completed</span>" not in html  # the badge says what became of the reconciles
        assert f"Job {job.pk}" in dashboard
