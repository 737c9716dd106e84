"""The fleet dashboard: its figures for a seeded fleet, the lists they link to, access, queries."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from console.dashboard import selectors
from fleet.models import Kyma, ReconcileRecord
from listener.models import WatchEventRecord
from pki import services as pki_services
from pki.models import Certificate, GatewaySecretState
from tests.console.test_api import KUBECONFIG
from tests.factories import KymaFactory

pytestmark = pytest.mark.django_db

DASHBOARD = "/admin/fleet/"
MAX_QUERIES = 16  # session, user and the overview's nine reads (11), with some room


def event(kyma: Kyma, at: dt.datetime, count: int = 1, outcome: str = "queued") -> WatchEventRecord:
    return WatchEventRecord(
        kyma=kyma,
        received_at=at,
        component="lifecycle-manager",
        contract="v2",
        watched_namespace="kyma-system",
        watched_name="default",
        gvk_group="operator.kyma-project.io",
        gvk_version="v1beta2",
        gvk_kind="Kyma",
        outcome=outcome,
        count=count,
    )


def failing_conditions(message: str) -> list[dict]:
    return [
        {"type": "Runtime", "status": "True", "reason": "Reachable", "message": "the API server answers"},
        {"type": "SKRWebhook", "status": "False", "reason": "WatcherFailing", "message": message},
    ]


@pytest.fixture
def now():
    return timezone.now()


@pytest.fixture
def fleet(now, settings):
    """A fleet with something in every figure, each number different so mix-ups show."""
    settings.WATCHER_SILENT_AFTER = 120
    ready = KymaFactory.create_batch(3, state="Ready", watcher_last_seen_at=now - dt.timedelta(seconds=10))
    older_failure = KymaFactory(
        state="Error",
        conditions=failing_conditions("ImagePullBackOff: no such image"),
        state_reason="WatcherFailing",
        last_reconcile_at=now - dt.timedelta(minutes=30),
        error_streak=4,
    )
    newer_failure = KymaFactory(
        state="Error",
        conditions=failing_conditions("CrashLoopBackOff: exit 1"),
        state_reason="WatcherFailing",
        last_reconcile_at=now - dt.timedelta(minutes=2),
        error_streak=1,
    )
    KymaFactory(state="Processing", watcher_last_seen_at=now - dt.timedelta(hours=1))  # silent
    KymaFactory(state="Processing", watcher_last_seen_at=now - dt.timedelta(minutes=5))  # silent
    unheard = KymaFactory(state="")  # never heard, with a kubeconfig: counts
    unheard.kubeconfig = KUBECONFIG
    unheard.save()
    KymaFactory(state="")  # never heard, no kubeconfig: not a silent watcher
    KymaFactory(state="Warning", watcher_last_seen_at=now - dt.timedelta(hours=2), deletion_timestamp=now)

    this_minute = now.replace(second=0, microsecond=0)
    WatchEventRecord.objects.bulk_create(
        [
            event(ready[0], this_minute - dt.timedelta(minutes=3), count=5),
            event(ready[1], this_minute - dt.timedelta(minutes=3) + dt.timedelta(seconds=30), count=2),
            event(ready[2], this_minute - dt.timedelta(minutes=10), count=4),
            event(ready[0], this_minute - dt.timedelta(minutes=59), count=1),
            event(ready[0], now - dt.timedelta(hours=2), count=100),  # outside the hour
        ]
    )
    durations = [10, 20, 30, 40, 50, 60, 70, 80, 90, 1000]
    ReconcileRecord.objects.bulk_create(
        [
            ReconcileRecord(
                kyma=ready[index % 3],
                started_at=now - dt.timedelta(minutes=index + 1),
                duration_ms=ms,
                state="Ready",
            )
            for index, ms in enumerate(durations)
        ]
        + [
            ReconcileRecord(
                kyma=ready[0], started_at=now - dt.timedelta(hours=3), duration_ms=5, state="Ready"
            )
        ]
    )
    pki_services.ca_bootstrap()
    expiring = pki_services.certificate_for_kyma(kyma=ready[0])
    overdue = pki_services.certificate_for_kyma(kyma=ready[1])
    pki_services.certificate_for_kyma(kyma=ready[2])
    Certificate.objects.filter(pk=expiring.pk).update(not_after=now + dt.timedelta(days=3))
    Certificate.objects.filter(pk=overdue.pk).update(renew_after=now - dt.timedelta(hours=3))
    Certificate.objects.filter(pk=expiring.pk).update(renew_after=now + dt.timedelta(days=1))
    return {"ready": ready, "failures": [newer_failure, older_failure], "unheard": unheard}


class TestFigures:
    def test_given_a_fleet_when_reading_the_overview_then_every_figure_counts_what_it_says(self, fleet, now):
        overview = selectors.fleet_overview(now)

        assert overview.states == {
            "": 2,
            "Processing": 2,
            "Ready": 3,
            "Warning": 1,
            "Error": 2,
            "Deleting": 0,
        }
        assert overview.kymas == 10
        assert overview.watchers == {"silent": 2, "never": 1}
        assert overview.events_total == 5 + 2 + 4 + 1
        assert overview.events[-4] == 7 and overview.events[-11] == 4 and overview.events[0] == 1
        assert overview.reconciles_total == 10
        assert (overview.latency.p50, overview.latency.p95, overview.latency.sample) == (50, 1000, 10)
        assert overview.certificates_expiring == 1
        assert overview.renewals_overdue == 1

    def test_given_failing_runtimes_then_grouped_by_reason_most_recent_first_in_each(self, fleet, now):
        groups = selectors.fleet_overview(now).failing_groups

        assert [(g.reason, g.count) for g in groups] == [("WatcherFailing", 2)]
        failing = groups[0].kymas
        assert [row.kyma.pk for row in failing] == [k.pk for k in fleet["failures"]]
        assert failing[0].reason == "WatcherFailing"
        assert failing[0].message == "CrashLoopBackOff: exit 1"


UNREACHABLE = (
    "rt: MaxRetryError: HTTPSConnectionPool(host='10.0.0.1', port=443): Max retries exceeded with url: "
    "/api (Caused by NewConnectionError('Failed to establish a new connection: "
    "[Errno 111] Connection refused'))"
)


def unreachable(n: int, now) -> list[Kyma]:
    conditions = [{"type": "Runtime", "status": "False", "reason": "Unreachable", "message": UNREACHABLE}]
    return [
        KymaFactory(
            state="Error",
            state_reason="Unreachable",
            conditions=conditions,
            last_reconcile_at=now - dt.timedelta(seconds=index),
        )
        for index in range(n)
    ]


class TestFailuresByReason:
    def test_given_many_failing_runtimes_then_counted_per_reason_largest_first(self, now):
        unreachable(12, now)
        KymaFactory.create_batch(3, state="Error", state_reason="ModuleNotInCatalog")
        KymaFactory(state="Error", state_reason="")

        groups, other = selectors.failing_by_reason(groups=2, per_group=5)

        assert [(g.reason, g.count, len(g.kymas)) for g in groups] == [
            ("Unreachable", 12, 5),
            ("ModuleNotInCatalog", 3, 3),
        ]
        assert other == 1
        newest = [row.kyma.last_reconcile_at for row in groups[0].kymas]
        assert newest == sorted(newest, reverse=True)

    def test_given_the_dashboard_then_one_line_per_reason_with_a_readable_sentence_and_link(
        self, admin_client, now
    ):
        unreachable(25, now)
        KymaFactory.create_batch(2, state="Error", state_reason="WatcherFailing")

        html = admin_client.get(DASHBOARD).content.decode()
        section = html[html.index('id="cp-failing"') :]

        assert section.count('class="cp-reason-group"') == 2
        assert '<span class="cp-count">25</span> <strong>Unreachable</strong>' in section
        assert "The runtime&#x27;s API server cannot be reached." in section
        assert "cannot be reached: connection refused." in section  # each Kyma's own sentence
        assert section.index("Unreachable") < section.index("WatcherFailing")
        assert section.count("<details><summary>Raw detail") == 10  # ten shown per reason, raw folded
        url = re.search(r'href="([^"]+)" class="cp-reason-link"', section).group(1).replace("&amp;", "&")
        listing = admin_client.get(url)
        assert listing.context["cl"].result_count == 25


def figure(html: str, element_id: str) -> int:
    match = re.search(rf'href="([^"]+)" id="{element_id}">(\d+)', html)
    assert match, f"no figure {element_id}"
    return int(match.group(2))


def link(html: str, element_id: str) -> str:
    match = re.search(rf'href="([^"]+)" id="{element_id}"', html)
    assert match, f"no link {element_id}"
    return match.group(1).replace("&amp;", "&")


class TestPage:
    def test_given_staff_when_opening_the_dashboard_then_figures_show(self, admin_client, fleet):
        page = admin_client.get(DASHBOARD)
        html = page.content.decode()

        assert page.status_code == 200
        assert figure(html, "cp-kymas-total") == 10
        assert figure(html, "cp-errors") == 2
        assert figure(html, "cp-silent") == 2 and figure(html, "cp-never") == 1
        assert figure(html, "cp-expiring") == 1 and figure(html, "cp-overdue") == 1
        assert figure(html, "cp-events-total") == 12 and figure(html, "cp-reconciles-total") == 10
        assert "CrashLoopBackOff: exit 1" in html and "ImagePullBackOff" in html
        assert html.count("<rect ") == 120  # two charts of sixty minutes
        assert "/admin/controlplane/kyma/?state__exact=Error" in html

    def test_given_the_control_plane_keeps_the_gateway_secret_then_its_expiry_shows(
        self, admin_client, fleet
    ):
        assert "Gateway credential" not in admin_client.get(DASHBOARD).content.decode()  # not kept here
        now = timezone.now()
        GatewaySecretState.objects.create(
            namespace="istio-system",
            name="kcp-listener-gateway-tls",
            certificate_not_after=now + dt.timedelta(days=59, hours=1),
            bundle_fingerprints=["A", "B"],
            synced_at=now - dt.timedelta(minutes=3),
        )
        html = admin_client.get(DASHBOARD).content.decode()
        card = html[html.index('id="cp-gateway"') :].split("</div>\n  </div>")[0]
        assert "1\xa0month" in card or "59\xa0days" in card or "8\xa0weeks" in card
        assert "2 CA(s) trusted" in card and "checked 3\xa0minutes ago" in card
        assert (
            "cp-alert"
            not in html[html.rindex("<div", 0, html.index('id="cp-gateway"')) : html.index('id="cp-gateway"')]
        )

    @pytest.mark.parametrize(
        ("element_id", "expected"),
        [
            ("cp-kymas-total", 10),
            ("cp-errors", 2),
            ("cp-silent", 2),
            ("cp-never", 1),
            ("cp-expiring", 1),
            ("cp-overdue", 1),
            ("cp-reconciles-total", 10),
        ],
    )
    def test_given_a_figure_when_following_its_link_then_the_list_has_that_many_rows(
        self, admin_client, fleet, element_id, expected
    ):
        html = admin_client.get(DASHBOARD).content.decode()

        listing = admin_client.get(link(html, element_id))

        assert listing.status_code == 200
        assert listing.context["cl"].result_count == figure(html, element_id) == expected

    def test_given_the_events_figure_when_following_it_then_the_listed_events_sum_to_it(
        self, admin_client, fleet
    ):
        html = admin_client.get(DASHBOARD).content.decode()

        listing = admin_client.get(link(html, "cp-events-total"))

        assert sum(e.count for e in listing.context["cl"].queryset) == figure(html, "cp-events-total")

    def test_given_each_state_when_following_its_link_then_the_list_matches(self, admin_client, fleet):
        html = admin_client.get(DASHBOARD).content.decode()
        rows = re.findall(r'<a href="([^"]+)" class="cp-state-count" data-state="(\w+)">(\d+)</a>', html)

        assert len(rows) == 6
        for url, state, count in rows:
            listing = admin_client.get(url.replace("&amp;", "&"))
            assert listing.context["cl"].result_count == int(count), state

    def test_given_a_chart_bar_when_following_it_then_that_minutes_events_are_listed(
        self, admin_client, fleet
    ):
        html = admin_client.get(DASHBOARD).content.decode()
        bars = re.findall(
            r'<a href="(/admin/listener/watcheventrecord/[^"]+)"><rect[^>]*><title>[^<]*: (\d+) ', html
        )

        busiest_url, busiest = max(bars, key=lambda bar: int(bar[1]))
        listing = admin_client.get(busiest_url.replace("&amp;", "&"))

        assert int(busiest) == 7
        assert sorted(e.count for e in listing.context["cl"].queryset) == [2, 5]

    def test_given_the_admin_index_then_it_links_to_the_dashboard(self, admin_client):
        html = admin_client.get(reverse("admin:index")).content.decode()
        assert 'id="cp-fleet-link"' in html and DASHBOARD in html


class TestAccess:
    def test_given_anonymous_when_opening_the_dashboard_then_sent_to_login(self, client):
        response = client.get(DASHBOARD)
        assert response.status_code == 302 and "/admin/login/" in response["Location"]

    def test_given_a_non_staff_user_when_opening_the_dashboard_then_sent_to_login(
        self, client, django_user_model
    ):
        client.force_login(django_user_model.objects.create_user("user", password="x-123456789"))
        response = client.get(DASHBOARD)
        assert response.status_code == 302 and "/admin/login/" in response["Location"]

    def test_given_staff_without_kyma_permission_then_forbidden(self, client, django_user_model):
        client.force_login(
            django_user_model.objects.create_user("staff", password="x-123456789", is_staff=True)
        )
        assert client.get(DASHBOARD).status_code == 403
        assert "cp-fleet-link" not in client.get(reverse("admin:index")).content.decode()


def grow(factor: int, now: dt.datetime) -> None:
    """Ten times more of everything the dashboard reads."""
    kymas = KymaFactory.create_batch(
        factor,
        state="Error",
        conditions=failing_conditions("boom"),
        last_reconcile_at=now,
        watcher_last_seen_at=now - dt.timedelta(hours=1),
    )
    WatchEventRecord.objects.bulk_create(
        [event(kyma, now - dt.timedelta(minutes=m)) for kyma in kymas for m in range(10)]
    )
    ReconcileRecord.objects.bulk_create(
        [
            ReconcileRecord(kyma=kyma, started_at=now - dt.timedelta(minutes=m), duration_ms=m, state="Error")
            for kyma in kymas
            for m in range(10)
        ]
    )


def test_given_a_bigger_fleet_then_the_dashboard_makes_the_same_number_of_queries(
    admin_client, fleet, now, django_assert_max_num_queries
):
    admin_client.get(DASHBOARD)  # warm the session and caches
    with CaptureQueriesContext(connection) as small:
        assert admin_client.get(DASHBOARD).status_code == 200
    grow(40, now)

    with django_assert_max_num_queries(MAX_QUERIES), CaptureQueriesContext(connection) as large:
        assert admin_client.get(DASHBOARD).status_code == 200

    assert len(large) == len(small)


def test_given_the_kyma_list_when_filtering_never_heard_watchers_then_only_those_with_kubeconfig(
    admin_client, fleet
):
    listing = admin_client.get(reverse("admin:controlplane_kyma_changelist") + "?watcher=never")
    assert [k.pk for k in listing.context["cl"].result_list] == [fleet["unheard"].pk]
    assert "never heard" in listing.content.decode()
