"""A Kyma's admin page: timeline, conditions, modules, runtime-watcher manifests; no secrets shown;
the same number of queries however long the history; no certificate issued by looking."""

from __future__ import annotations

import base64
import datetime as dt

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from fleet.models import ReconcileRecord, SyncResource
from fleet.services import modules
from listener.models import WatchEventRecord
from pki import services as pki_services
from pki.models import Certificate
from tests.factories import KymaFactory, ModuleFactory, SyncResourceFactory, WatcherFactory
from tests.fleet.test_api import KUBECONFIG
from tests.fleet.test_dashboard import event

pytestmark = pytest.mark.django_db

MAX_QUERIES = 14  # the admin's own (session, user, the Kyma) and the page's seven reads


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
