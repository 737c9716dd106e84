"""A Kyma's admin page: timeline, conditions, modules, runtime-watcher manifests; no secrets shown;
the same number of queries however long the history; no certificate issued by looking."""

from __future__ import annotations

import base64
import datetime as dt
import re

import pytest
from django.contrib.auth.models import Permission
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from fleet.models import Kyma, ReconcileRecord, SyncResource
from fleet.services import modules
from listener.models import WatchEventRecord
from pki import services as pki_services
from pki.models import Certificate
from tests.console.test_api import KUBECONFIG
from tests.console.test_dashboard import event
from tests.factories import KymaFactory, ModuleFactory, SyncResourceFactory, WatcherFactory

pytestmark = pytest.mark.django_db

# The admin's own (session, user, the Kyma), the page's seven reads, the rollouts holding a target
# of it (two), its maintenance-window policy (one) and the runtime-watcher settings it shows (at
# most two, for a Kyma not reconciled yet: the fleet's then).
MAX_QUERIES = 19


def page(client, kyma) -> str:
    response = client.get(reverse("admin:controlplane_kyma_change", args=[kyma.pk]))
    assert response.status_code == 200
    return response.content.decode()


@pytest.fixture
def kyma():
    now = timezone.now()
    kyma = KymaFactory(
        state="Error",
        modules=[{"name": "keda"}, {"name": "serverless", "channel": "fast"}],
        module_status=[{"name": "keda", "state": "Ready", "channel": "regular", "version": "2.16.0"}],
        conditions=[
            {"type": "Runtime", "status": "True", "reason": "Reachable", "message": "the API server answers"},
            {
                "type": "SKRWebhook",
                "status": "False",
                "reason": "WatcherFailing",
                "message": "CrashLoopBackOff",
            },
        ],
        error_streak=3,
    )
    kyma.kubeconfig = KUBECONFIG
    kyma.save()
    keda = ModuleFactory(name="keda")
    config, _ = modules.moduleconfig_upsert(
        kyma=kyma, module=keda, spec={"replicas": 2}, source_generation=1, source_resource_version="7"
    )
    modules.moduleconfig_set_status(config=config, status={"state": "Warning", "message": "scaling down"})
    resource = SyncResourceFactory(kyma=kyma, module=keda, name="keda-manifests")
    SyncResource.objects.filter(pk=resource.pk).update(
        manifest_status=[
            {"kind": "ConfigMap", "name": "settings", "state": "Applied", "hash": "abc"},
            {"kind": "Deployment", "name": "keda", "state": "Failed", "message": "quota exceeded"},
        ]
    )
    WatcherFactory(name="kyma-watcher", manager="lifecycle-manager", component="lifecycle-manager")
    WatchEventRecord.objects.bulk_create(
        [
            event(kyma, now - dt.timedelta(minutes=1), count=7, outcome="coalesced"),
            event(kyma, now - dt.timedelta(minutes=20), outcome="forward-failed"),
        ]
    )
    ReconcileRecord.objects.create(
        kyma=kyma,
        started_at=now - dt.timedelta(minutes=2),
        duration_ms=1234,
        state="Error",
        runtime_writes=2,
        message="the runtime watcher cannot run",
    )
    pki_services.ca_bootstrap()
    pki_services.certificate_issue_for_kyma(kyma=kyma, now=now - dt.timedelta(days=40))
    pki_services.certificate_issue_for_kyma(kyma=kyma)
    return kyma


class TestSections:
    def test_given_a_kyma_when_opening_its_page_then_timeline_merges_events_reconciles_certificates(
        self, admin_client, kyma
    ):
        html = page(admin_client, kyma)
        timeline = html[html.index('id="cp-timeline"') : html.index('id="cp-manifests"')]

        kinds = [
            kind
            for kind in ("event", "reconcile", "certificate")
            for _ in range(timeline.count(f"cp-timeline-{kind}"))
        ]
        assert sorted(kinds) == ["certificate", "certificate", "event", "event", "reconcile"]
        # newest first: the certificate renewed just now, the event a minute ago, the reconcile at two
        order = [
            timeline.index(marker)
            for marker in ("Certificate renewed", "coalesced", "1234 ms", "forward-failed")
        ]
        assert order == sorted(order)
        assert "Certificate issued" in timeline and "the runtime watcher cannot run" in timeline
        assert "lifecycle-manager: Kyma kyma-system/default" in timeline

    def test_given_a_kyma_when_opening_its_page_then_conditions_and_modules_show(self, admin_client, kyma):
        html = page(admin_client, kyma)
        modules_section = html[html.index('id="cp-modules"') : html.index('id="cp-timeline"')]

        assert "WatcherFailing" in html and "CrashLoopBackOff" in html
        assert "keda" in modules_section and "serverless" in modules_section
        assert "2.16.0" in modules_section  # observed version
        revision = kyma.module_configs.get().revision
        assert f"revision {revision}" in modules_section and "scaling down" in modules_section
        assert "keda-manifests" in modules_section and "Failed" in modules_section
        assert "Deployment keda: quota exceeded" in modules_section

    def test_given_a_certificate_when_opening_the_page_then_manifests_show_without_secrets(
        self, admin_client, kyma
    ):
        current = Certificate.objects.get(kyma=kyma, superseded_at__isnull=True)
        key_pem = current.private_key.reveal_bytes()

        html = page(admin_client, kyma)
        manifests = html[html.index('id="cp-manifests"') :]

        assert "ValidatingWebhookConfiguration" in manifests and "skr-webhook-tls" in manifests
        assert "kcp-system.kyma-watcher.operator.kyma-project.io" in manifests
        assert "tls.key: &lt;redacted&gt;" in manifests
        assert "PRIVATE KEY" not in html
        assert base64.b64encode(key_pem).decode()[:40] not in html
        assert key_pem.decode().splitlines()[1] not in html
        assert "very-secret-token" not in html and "clusters" not in html
        assert "No certificate has been issued" not in html

    def test_given_no_certificate_when_opening_the_page_then_placeholders_and_nothing_issued(
        self, admin_client
    ):
        pki_services.ca_bootstrap()
        kyma = KymaFactory()

        html = page(admin_client, kyma)

        assert "No certificate has been issued for this Kyma yet" in html
        assert "ValidatingWebhookConfiguration" in html
        assert not Certificate.objects.filter(kyma=kyma).exists()

    def test_given_no_ca_at_all_when_opening_the_page_then_it_renders_without_creating_one(
        self, admin_client
    ):
        from pki.models import CertificateAuthority

        kyma = KymaFactory(skr_domain="")

        html = page(admin_client, kyma)

        assert "it needs an SKR domain first" in html
        assert not CertificateAuthority.objects.exists()


def grow_history(kyma, events: int, reconciles: int, certificates: int) -> None:
    now = timezone.now()
    WatchEventRecord.objects.bulk_create([event(kyma, now - dt.timedelta(seconds=s)) for s in range(events)])
    ReconcileRecord.objects.bulk_create(
        [
            ReconcileRecord(kyma=kyma, started_at=now - dt.timedelta(seconds=s), duration_ms=s, state="Ready")
            for s in range(reconciles)
        ]
    )
    for _ in range(certificates):
        pki_services.certificate_issue_for_kyma(kyma=kyma)
    others = KymaFactory.create_batch(20)
    WatchEventRecord.objects.bulk_create([event(other, now) for other in others for _ in range(20)])


def test_given_a_long_history_then_the_page_makes_the_same_number_of_queries_and_stays_bounded(
    admin_client, kyma, django_assert_max_num_queries
):
    page(admin_client, kyma)
    with CaptureQueriesContext(connection) as short:
        page(admin_client, kyma)
    grow_history(kyma, events=400, reconciles=200, certificates=12)

    with django_assert_max_num_queries(MAX_QUERIES), CaptureQueriesContext(connection) as long:
        html = page(admin_client, kyma)

    assert len(long) == len(short)
    assert html.count("cp-timeline-event") == 50 and html.count("cp-timeline-reconcile") == 50
    assert html.count("cp-timeline-certificate") == 10


UNREACHABLE = (
    "runtime rt-x: MaxRetryError: HTTPSConnectionPool(host='10.1.2.3', port=6443): Max retries exceeded "
    "with url: /api/v1/namespaces/kyma-system (Caused by NewConnectionError('<urllib3.connection."
    "HTTPSConnection object at 0x7f>: Failed to establish a new connection: [Errno 111] Connection refused'))"
)


@pytest.fixture
def unreachable_kyma():
    return KymaFactory(
        state="Error",
        state_reason="Unreachable",
        modules=[{"name": "keda"}],
        module_status=[{"name": "keda", "state": "Ready", "version": "2.16.0"}],
        conditions=[
            {
                "type": "Runtime",
                "status": "False",
                "reason": "Unreachable",
                "message": UNREACHABLE,
                "lastTransitionTime": "2026-01-02T03:04:05Z",
            },
            {"type": "Modules", "status": "True", "reason": "Ready", "message": "all modules are ready"},
        ],
        last_operation={"operation": UNREACHABLE, "lastUpdateTime": "2026-01-02T03:04:05Z"},
    )


def section(html: str, start: str, end: str | None = None) -> str:
    begin = html.index(f'id="{start}"')
    return html[begin : html.index(f'id="{end}"', begin)] if end else html[begin:]


class TestReadView:
    def test_given_the_kyma_page_then_it_is_a_read_view_with_an_edit_link(self, admin_client, kyma):
        html = page(admin_client, kyma)

        assert 'name="channel"' not in html and "<textarea" not in html  # no form fields on the page
        assert "_addanother" not in html and "Save and add another" not in html
        edit = reverse("admin:controlplane_kyma_edit", args=[kyma.pk])
        assert f'href="{edit}" id="cp-edit"' in html
        assert "keda" in section(html, "cp-spec") and "serverless · fast" in section(html, "cp-spec")

    def test_given_the_edit_view_then_modules_are_rows_not_json_and_no_save_and_add_another(
        self, admin_client, kyma
    ):
        ModuleFactory(name="serverless", channels={"regular": "1.0.0", "fast": "1.1.0"})
        response = admin_client.get(reverse("admin:controlplane_kyma_edit", args=[kyma.pk]))
        html = response.content.decode()

        assert response.status_code == 200
        assert 'name="modules-0-name"' in html and 'name="modules-count"' in html
        assert '<option value="keda" selected>keda</option>' in html
        assert '<option value="fast" selected>fast</option>' in html  # serverless' channel
        assert 'name="modules"' not in html  # no JSON textarea
        assert 'name="_addanother"' not in html and 'name="_continue"' in html

    def test_given_rows_posted_then_modules_are_saved_and_extra_fields_kept(self, admin_client):
        kyma = KymaFactory(modules=[{"name": "keda", "controller": "kcp"}, {"name": "serverless"}])
        url = reverse("admin:controlplane_kyma_edit", args=[kyma.pk])
        form = admin_client.get(url).context["adminform"].form
        data = {
            "namespace": kyma.namespace,
            "name": kyma.name,
            "runtime_id": kyma.runtime_id,
            "skr_domain": kyma.skr_domain,
            "channel": "fast",
            "labels": "{}",
            "annotations": "{}",
            "opened_version": form.initial["opened_version"],
            "opened_state": form.initial["opened_state"],
            "modules-count": "4",
            "modules-0-name": "keda",
            "modules-0-channel": "regular",
            "modules-0-managed": "on",
            "modules-0-policy": "Ignore",
            "modules-0-extra": '{"controller": "kcp"}',
            "modules-1-name": "serverless",
            "modules-1-managed": "on",
            "modules-1-remove": "on",
            "modules-2-name": "istio",
            "modules-2-policy": "CreateAndDelete",
        }

        response = admin_client.post(url, data)

        assert response.status_code == 302, response.context["adminform"].form.errors
        assert response["Location"] == reverse("admin:controlplane_kyma_change", args=[kyma.pk])
        kyma.refresh_from_db()
        assert kyma.channel == "fast"
        assert kyma.modules == [
            {
                "name": "keda",
                "channel": "regular",
                "controller": "kcp",
                "customResourcePolicy": "Ignore",
                "managed": True,
            },
            {"name": "istio", "managed": False, "customResourcePolicy": "CreateAndDelete"},
        ]

    def test_given_duplicate_rows_then_the_edit_form_says_so(self, admin_client):
        kyma = KymaFactory(modules=[])
        url = reverse("admin:controlplane_kyma_edit", args=[kyma.pk])
        form = admin_client.get(url).context["adminform"].form
        data = {
            "namespace": kyma.namespace,
            "name": kyma.name,
            "runtime_id": kyma.runtime_id,
            "channel": "regular",
            "labels": "{}",
            "annotations": "{}",
            "opened_version": form.initial["opened_version"],
            "modules-count": "2",
            "modules-0-name": "keda",
            "modules-1-name": "keda",
        }
        response = admin_client.post(url, data)
        assert response.status_code == 200 and "duplicate module" in response.content.decode()

    def test_given_an_unreachable_runtime_then_one_sentence_raw_detail_folded(
        self, admin_client, unreachable_kyma
    ):
        html = page(admin_client, unreachable_kyma)
        problem = section(html, "cp-problem", "cp-conditions")

        sentence = "The runtime&#x27;s API server cannot be reached: connection refused."
        assert f"<strong>{sentence}</strong>" in problem
        # the raw urllib3 text only inside <details>, never as the visible sentence
        raw_at = problem.index("HTTPSConnectionPool")
        assert problem.rindex("<details", 0, raw_at) > problem.index("<strong>")
        conditions = section(html, "cp-conditions", "cp-modules")
        assert sentence in conditions and "<details" in conditions

    def test_given_last_operation_then_text_and_time_not_json(self, admin_client, unreachable_kyma):
        html = page(admin_client, unreachable_kyma)
        operation = section(html, "cp-last-operation", "cp-conditions")
        assert "&quot;operation&quot;" not in html and '{"operation"' not in html
        assert "2026-01-02 03:04:05 UTC" in operation

    def test_given_an_unreachable_runtime_then_module_states_are_unknown_and_marked_stale(
        self, admin_client, unreachable_kyma
    ):
        modules_section = section(page(admin_client, unreachable_kyma), "cp-modules", "cp-timeline")

        assert ">Unknown</span>" in modules_section and "stale: last known Ready" in modules_section
        assert ">Ready</span>" not in modules_section
        assert "module states are unknown" in modules_section

    def test_given_a_reachable_runtime_then_module_states_are_shown_as_reported(self, admin_client, kyma):
        modules_section = section(page(admin_client, kyma), "cp-modules", "cp-timeline")
        assert ">Ready</span>" in modules_section and "stale" not in modules_section

    def test_given_reconciles_with_changes_then_the_timeline_says_why_and_what(self, admin_client, kyma):
        ReconcileRecord.objects.create(
            kyma=kyma,
            started_at=timezone.now(),
            duration_ms=80,
            state="Ready",
            runtime_writes=1,
            reason="watch-event",
            changes=[
                {"kind": "spec", "field": "channel", "before": "regular", "after": "fast"},
                {"kind": "module-added", "module": "serverless", "source": "made in the runtime"},
                {"kind": "applied", "resource": "Deployment kyma-system/skr-webhook", "action": "updated"},
                {"kind": "module-state", "module": "keda", "before": "Processing", "after": "Ready"},
                {"kind": "drift-corrected", "text": "Service skr-webhook put back"},
            ],
        )
        timeline = section(page(admin_client, kyma), "cp-timeline", "cp-spec")

        assert "why: event from the runtime" in timeline
        for line in (
            "channel regular → fast",
            "module serverless added (made in the runtime)",
            "Deployment kyma-system/skr-webhook updated",
            "module keda: Processing → Ready",
            "Service skr-webhook put back",
        ):
            assert f"<li>{line}</li>" in timeline

    def test_given_the_page_then_every_time_is_absolute_with_seconds_and_relative_beside(
        self, admin_client, kyma
    ):
        html = page(admin_client, kyma)
        timeline = section(html, "cp-timeline", "cp-spec")

        assert re.search(
            r'<time class="cp-time cp-time-stacked" datetime="[^"]+Z">'
            r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC</time>",
            timeline,
        )
        assert re.search(r'<span class="cp-ago">\d+ min ago</span>', timeline)
        assert not re.search(r"\b[ap]\.m\.", html) and " minutes ago" not in html


class TestLive:
    def test_given_the_page_then_it_polls_its_live_fragment(self, admin_client, kyma):
        html = page(admin_client, kyma)
        live = reverse("admin:controlplane_kyma_live", args=[kyma.pk])
        assert f'data-live-url="{live}"' in html and "controlplane/live.js" in html

    def test_given_a_change_then_the_fragment_shows_it_without_the_page(self, admin_client, kyma):
        url = reverse("admin:controlplane_kyma_live", args=[kyma.pk])
        before = admin_client.get(url)
        Kyma.objects.filter(pk=kyma.pk).update(state="Ready", state_reason="", conditions=[])
        after = admin_client.get(url).content.decode()

        assert before.status_code == 200 and "no-store" in before["Cache-Control"]
        assert "<html" not in after and 'id="cp-kyma-summary"' in after and 'id="cp-timeline"' in after
        assert "cp-state-Error" in before.content.decode() and 'cp-state-Ready">Ready' in after

    def test_given_no_admin_session_then_the_fragment_is_refused(self, client, django_user_model, kyma):
        url = reverse("admin:controlplane_kyma_live", args=[kyma.pk])
        assert client.get(url).status_code == 302  # to the login
        user = django_user_model.objects.create_user("plain", password="plain-password-123")
        client.force_login(user)
        assert client.get(url).status_code == 302
        staff = django_user_model.objects.create_user("staff", password="staff-password-123", is_staff=True)
        client.force_login(staff)
        assert client.get(url).status_code == 403
        staff.user_permissions.add(Permission.objects.get(codename="view_kyma"))
        assert client.get(url).status_code == 200
        assert client.post(url).status_code == 405

    def test_given_a_long_history_then_the_fragment_makes_the_same_number_of_queries(
        self, admin_client, kyma
    ):
        url = reverse("admin:controlplane_kyma_live", args=[kyma.pk])
        admin_client.get(url)
        with CaptureQueriesContext(connection) as short:
            admin_client.get(url)
        grow_history(kyma, events=100, reconciles=100, certificates=3)
        with CaptureQueriesContext(connection) as long:
            admin_client.get(url)
        assert len(long) == len(short)


def test_given_a_too_deep_extra_in_a_module_row_then_no_500(admin_client):
    kyma = KymaFactory(modules=[])
    url = reverse("admin:controlplane_kyma_edit", args=[kyma.pk])
    form = admin_client.get(url).context["adminform"].form
    data = {
        "namespace": kyma.namespace,
        "name": kyma.name,
        "runtime_id": kyma.runtime_id,
        "channel": "regular",
        "labels": "{}",
        "annotations": "{}",
        "opened_version": form.initial["opened_version"],
        "modules-count": "1",
        "modules-0-name": "keda",
        "modules-0-managed": "on",
        "modules-0-extra": '{"a": ' * 5000 + "1" + "}" * 5000,
    }
    response = admin_client.post(url, data)
    assert response.status_code == 302
    kyma.refresh_from_db()
    assert kyma.modules == [{"name": "keda", "managed": True, "customResourcePolicy": "CreateAndDelete"}]


def test_given_a_reconcile_that_corrected_drift_then_the_timeline_names_what(admin_client, kyma):
    ReconcileRecord.objects.create(
        kyma=kyma,
        started_at=timezone.now(),
        duration_ms=42,
        state="Ready",
        runtime_writes=1,
        drift_corrected=[{"kind": "Deployment", "namespace": "kyma-system", "name": "skr-webhook"}],
    )
    html = page(admin_client, kyma)
    timeline = html[html.index('id="cp-timeline"') : html.index('id="cp-manifests"')]
    assert "drift corrected: Deployment kyma-system/skr-webhook" in timeline
