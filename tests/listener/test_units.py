"""Listener building blocks without a server: XFCC parsing, event contract, coverage, records."""

from __future__ import annotations

import datetime as dt
import time
from urllib.parse import quote

import pytest
from django.utils import timezone

from fleet import queue
from listener import identity
from listener.events import Change, EventInvalid, parse_event
from listener.models import WatchEventRecord
from listener.recorder import EventRecorder
from listener.services import stored_change
from tests.factories import KymaFactory

PEM = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


class TestXfcc:
    def test_given_quoted_cert_with_separators_inside_then_the_whole_pem_is_read(self):
        tricky = PEM.replace("MIIB", 'MI;I,B"x')
        header = f'By=spiffe://a;Cert="{quote(tricky, safe="")}";Subject="CN=a, O=b"'
        assert identity.xfcc_certificate_pem(header) == tricky

    def test_given_several_elements_then_the_first_counts(self):
        header = f"Cert={quote(PEM, safe='')};Subject=x,Cert={quote('other', safe='')}"
        assert identity.xfcc_certificate_pem(header) == PEM

    def test_given_no_cert_in_the_first_element_then_missing_even_if_a_later_has_one(self):
        with pytest.raises(identity.IdentityError, match="no Cert= field"):
            identity.xfcc_certificate_pem(f"Hash=abc,Cert={quote(PEM, safe='')}")

    def test_given_an_oversized_header_then_refused(self):
        with pytest.raises(identity.IdentityError, match="32 KiB"):
            identity.xfcc_certificate_pem("Cert=" + "x" * (32 * 1024))

    @pytest.mark.parametrize(
        ("trusted", "peer", "expected"),
        [
            (["10.0.0.0/8"], "10.1.2.3", True),
            (["10.0.0.0/8"], "11.0.0.1", False),
            (["::1"], "::1", True),
            ([], "127.0.0.1", False),
            (["127.0.0.1"], "not-an-ip", False),
        ],
    )
    def test_given_trusted_networks_then_only_peers_inside_count(self, settings, trusted, peer, expected):
        settings.LISTENER_TRUSTED_PROXIES = trusted
        assert identity.trusted_proxy(peer) is expected


class TestContract:
    def test_given_upstream_v2_body_then_parsed(self):
        event = parse_event(
            "v2",
            "lifecycle-manager",
            b'{"watched": {"Namespace": "a", "Name": "b"}, '
            b'"watchedGvk": {"group": "g", "version": "v1", "kind": "K"}, "extra": 1}',
        )
        assert (event.watched.namespace, event.watched.name, event.group, event.kind) == ("a", "b", "g", "K")
        assert event.payload()["watched"] == {"Namespace": "a", "Name": "b"}

    def test_given_v1_owner_without_namespace_then_400(self):
        with pytest.raises(EventInvalid, match=r"owner\.namespace"):
            parse_event(
                "v1",
                "x",
                b'{"watched": {"Name": "b"}, "watchedGvk": {"version": "v1", "kind": "K"}, '
                b'"owner": {"Name": "k"}}',
            )


class TestChange:
    BODY = (
        b'{"watched": {"Namespace": "kyma-system", "Name": "default"}, '
        b'"watchedGvk": {"group": "g", "version": "v1", "kind": "K"}'
    )

    def parse(self, change: bytes):
        return parse_event("v2", "lifecycle-manager", self.BODY + b', "change": ' + change + b"}")

    def test_given_our_watchers_change_then_the_reconcile_checks_it_in_the_runtime(self):
        event = self.parse(b'{"operation": "UPDATE", "uid": "u-1", "oldResourceVersion": "41"}')
        assert event.change == Change("UPDATE", "u-1", "41")
        assert stored_change(event) == queue.StoredChange(
            "g/v1", "K", "kyma-system", "default", "UPDATE", "u-1", "41"
        )
        assert "change" not in event.payload()  # forwarded as upstream's shape

    def test_given_upstreams_body_or_a_change_that_cannot_be_checked_then_none(self):
        assert parse_event("v2", "lifecycle-manager", self.BODY + b"}").change is None
        assert self.parse(b"null").change is None
        assert self.parse(b'{"operation": "DELETE", "uid": "u-1"}').change is None
        odd = parse_event(
            "v2",
            "lifecycle-manager",
            b'{"watched": {"Namespace": "a", "Name": "../../secrets"}, '
            b'"watchedGvk": {"version": "v1", "kind": "K"}, "change": {"operation": "CREATE"}}',
        )
        assert stored_change(odd) is None  # not a Kubernetes name: nothing to read, the delay instead

    @pytest.mark.parametrize(
        ("change", "message"),
        [
            (b'"UPDATE"', "change must be an object"),
            (b'{"operation": "PATCH"}', "change.operation"),
            (b'{"operation": "CREATE", "uid": 7}', "change.uid"),
            (b'{"operation": "UPDATE", "oldResourceVersion": "1\\n2"}', "change.oldResourceVersion"),
        ],
    )
    def test_given_a_malformed_change_then_400_saying_where(self, change, message):
        with pytest.raises(EventInvalid, match=message):
            self.parse(change)


@pytest.mark.django_db(transaction=True)
class TestCoverage:
    def test_given_a_countdown_then_events_inside_the_window_skip_the_round_trip(self, settings, task_queue):
        settings.LISTENER_RECONCILE_DELAY = 5
        kyma = KymaFactory()
        coverage = queue.Coverage()
        task_queue()
        assert coverage.request(kyma.pk) is True
        queue.started(kyma.pk)  # even if the mark went away (task started early)...
        assert coverage.request(kyma.pk) is False  # ...the window says the task cannot have started
        assert len(task_queue()) == 1

    def test_given_no_countdown_then_every_event_asks(self, settings, task_queue):
        settings.LISTENER_RECONCILE_DELAY = 0
        kyma = KymaFactory()
        coverage = queue.Coverage()
        task_queue()
        assert coverage.request(kyma.pk) is True
        queue.started(kyma.pk)
        assert coverage.request(kyma.pk) is True
        assert len(task_queue()) == 2

    def test_given_a_task_due_within_the_margin_then_every_event_asks_and_the_task_waits(
        self, settings, task_queue
    ):
        settings.LISTENER_RECONCILE_DELAY = 0.2
        settings.LISTENER_EVENT_MARGIN = 0.2  # no window: the queued task is never far enough off
        kyma = KymaFactory()
        coverage = queue.Coverage()
        assert coverage.request(kyma.pk) is True
        assert kyma.pk not in coverage._until
        asked_at = timezone.now()
        assert coverage.request(kyma.pk) is False
        assert queue.started(kyma.pk) >= asked_at + dt.timedelta(seconds=0.2)

    def test_given_an_overdue_task_then_an_event_makes_it_wait_the_delay_and_covers_what_follows(
        self, settings
    ):
        """The workers lag: the queued task is overdue. Without a window every event would ask."""
        settings.LISTENER_RECONCILE_DELAY, settings.LISTENER_EVENT_MARGIN = 0.5, 0.05
        settings.LISTENER_CLOCK_SKEW = 0.025
        kyma = KymaFactory()
        five_seconds_ago = timezone.now() - dt.timedelta(seconds=5)
        queue.flags().claim([kyma.pk], five_seconds_ago, five_seconds_ago)
        coverage = queue.Coverage()
        asked_at, asked_mono = timezone.now(), time.monotonic()
        assert coverage.request(kyma.pk) is False  # joined the queued task
        window = coverage._until[kyma.pk] - asked_mono
        assert 0.3 < window < 0.5 - 0.05 - 0.025 + 0.01  # the delay, less the margin and the skew
        assert coverage.request(kyma.pk) is False  # covered: no round trip
        assert queue.started(kyma.pk) >= asked_at + dt.timedelta(seconds=0.5)  # the task waits

    def test_given_no_margin_then_an_overdue_task_is_not_made_to_wait(self, settings):
        settings.LISTENER_RECONCILE_DELAY, settings.LISTENER_EVENT_MARGIN = 0.5, 0
        kyma = KymaFactory()
        five_seconds_ago = timezone.now() - dt.timedelta(seconds=5)
        queue.flags().claim([kyma.pk], five_seconds_ago, five_seconds_ago)
        coverage = queue.Coverage()
        assert coverage.request(kyma.pk) is False
        assert kyma.pk not in coverage._until
        not_before = queue.started(kyma.pk)
        assert not_before is None or not_before <= timezone.now()


@pytest.mark.django_db
def test_given_identical_events_when_flushed_then_one_row_with_a_count():
    kyma = KymaFactory()
    recorder = EventRecorder()
    event = parse_event(
        "v2", "lifecycle-manager", b'{"watched": {"Name": "b"}, "watchedGvk": {"version": "v1", "kind": "K"}}'
    )
    other = parse_event(
        "v2", "lifecycle-manager", b'{"watched": {"Name": "c"}, "watchedGvk": {"version": "v1", "kind": "K"}}'
    )
    now = timezone.now()
    for offset in range(5):
        recorder.add(kyma.pk, event, "coalesced", now + dt.timedelta(seconds=offset))
    recorder.add(kyma.pk, other, "queued", now)
    assert recorder.flush() == 2
    row = WatchEventRecord.objects.get(watched_name="b")
    assert row.count == 5 and row.received_at == now + dt.timedelta(seconds=4)
    assert recorder.flush() == 0


@pytest.mark.django_db
def test_given_many_records_when_housekeeping_runs_then_the_newest_n_per_kyma_stay(settings):
    from listener.tasks import housekeeping

    settings.LISTENER_EVENTS_KEPT = 3
    first, second = KymaFactory(), KymaFactory()
    now = timezone.now()
    for kyma in (first, second):
        WatchEventRecord.objects.bulk_create(
            WatchEventRecord(
                kyma=kyma,
                received_at=now - dt.timedelta(minutes=i),
                component="c",
                contract="v2",
                outcome="queued",
            )
            for i in range(5)
        )
    housekeeping()
    for kyma in (first, second):
        kept = list(
            WatchEventRecord.objects.filter(kyma=kyma)
            .order_by("-received_at")
            .values_list("received_at", flat=True)
        )
        assert kept == [now, now - dt.timedelta(minutes=1), now - dt.timedelta(minutes=2)]


@pytest.mark.django_db
def test_given_recent_events_when_the_kyma_page_opens_then_they_are_listed(admin_client):
    from django.urls import reverse

    kyma = KymaFactory()
    WatchEventRecord.objects.create(
        kyma=kyma,
        received_at=timezone.now(),
        component="lifecycle-manager",
        contract="v2",
        watched_namespace="kyma-system",
        watched_name="default",
        gvk_kind="Kyma",
        gvk_version="v1beta2",
        outcome="coalesced",
        count=7,
    )
    page = admin_client.get(reverse("admin:controlplane_kyma_change", args=[kyma.pk])).content.decode()
    assert "kyma-system/default" in page and "coalesced" in page
