"""The real listener (gunicorn, mutual TLS, certificates from our PKI) against the contract."""

from __future__ import annotations

import datetime as dt
import ssl
import time
import urllib.request

import pytest
from django.utils import timezone

from fleet.queue.marks import flags
from pki import crypto, selectors, services
from tests.factories import KymaFactory, WatcherFactory, beside
from tests.support.listener import (
    Credentials,
    bare_context,
    event_body,
    listener_for_test,
    module_listener,
    request,
)

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def running_listener(django_db_setup, django_db_blocker):
    started = module_listener(django_db_blocker)
    yield started
    started[0].stop()


@pytest.fixture
def listener(running_listener):
    return listener_for_test(running_listener)


@pytest.fixture
def kyma():
    return KymaFactory(runtime_id="rt-direct", skr_domain="rt-direct.kyma.example.com")


@pytest.fixture
def creds(kyma):
    return Credentials.for_kyma(kyma)


def foreign_credentials(**overrides) -> Credentials:
    now = timezone.now()
    ca = crypto.create_ca(common_name="foreign", now=now, validity=dt.timedelta(days=1))
    pair = crypto.issue_certificate(
        ca=ca,
        common_name="rt-direct",
        dns_names=["rt-direct.kyma.example.com"],
        now=now,
        validity=dt.timedelta(hours=1),
        **overrides,
    )
    return Credentials(pair.certificate_pem, pair.private_key_pem, ca.certificate_pem)


def our_ca_credentials(
    common_name: str, sans: list[str], *, validity=dt.timedelta(hours=1), now=None
) -> Credentials:
    """A certificate from our own CA with a chosen identity (what an attacker cannot get)."""
    now = now or timezone.now()
    ca = services.keypair(selectors.issuing_authority())
    pair = crypto.issue_certificate(
        ca=ca, common_name=common_name, dns_names=sans, now=now, validity=validity
    )
    return Credentials(pair.certificate_pem, pair.private_key_pem, selectors.ca_bundle_pem())


def scrape(port: int) -> dict[str, float]:
    """Samples of the listener's metrics port, keyed like ``name{label="value"}``."""
    from prometheus_client.parser import text_string_to_metric_families

    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
            samples[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return samples


def settled_scrape(port: int, *, quiet: float = 0.2, timeout: float = 10) -> dict[str, float]:
    """The metrics once nothing is in flight and two scrapes ``quiet`` seconds apart agree."""
    deadline = time.monotonic() + timeout
    last = scrape(port)
    while True:
        time.sleep(quiet)
        now = scrape(port)
        if now == last and now.get("watcher_listener_inflight_requests", 0) == 0:
            return now
        assert time.monotonic() < deadline, "the listener's metrics never settled"
        last = now


def rejected_at_tls(listener, context: ssl.SSLContext) -> bool:
    """True when the listener ends the TLS session instead of answering HTTP."""
    try:
        status, _ = request(listener.port, context, "/v2/lifecycle-manager/event", event_body())
    except (TimeoutError, ssl.SSLError, ConnectionResetError, BrokenPipeError):
        return True
    except OSError:
        return True
    return status == 0


class TestCertificates:
    def test_given_no_client_certificate_when_posting_then_the_handshake_is_refused(self, listener):
        assert rejected_at_tls(listener, bare_context())

    def test_given_a_foreign_ca_certificate_when_posting_then_refused(self, listener, kyma):
        assert rejected_at_tls(listener, foreign_credentials().context())

    def test_given_an_expired_certificate_when_posting_then_refused(self, listener, kyma):
        expired = our_ca_credentials(
            "rt-direct",
            ["rt-direct.kyma.example.com"],
            now=timezone.now() - dt.timedelta(days=2),
            validity=dt.timedelta(days=1),
        )
        assert rejected_at_tls(listener, expired.context())

    def test_given_a_valid_certificate_for_an_unknown_runtime_when_posting_then_403(self, listener):
        stranger = our_ca_credentials("rt-nobody", ["nobody.example.com"])
        status, body = request(listener.port, stranger.context(), "/v2/lifecycle-manager/event", event_body())
        assert status == 403
        assert "rt-nobody" in body["detail"]

    def test_given_a_certificate_without_the_kymas_san_when_posting_then_403(self, listener, kyma):
        impostor = our_ca_credentials("rt-direct", ["other.kyma.example.com"])
        status, body = request(listener.port, impostor.context(), "/v2/lifecycle-manager/event", event_body())
        assert status == 403
        assert "lacks the SAN 'rt-direct.kyma.example.com'" in body["detail"]


class TestAccepted:
    def test_given_a_valid_v2_event_when_posted_then_200_and_a_reconcile_is_queued(
        self, listener, kyma, creds, task_queue
    ):
        task_queue()
        status, body = request(listener.port, creds.context(), "/v2/lifecycle-manager/event", event_body())
        assert status == 200, body
        assert body == {"status": "accepted", "kyma": f"kcp-system/{kyma.name}", "outcome": "queued"}
        assert [(t.name, t.args) for t in task_queue()] == [("controlplane.kyma_reconcile", [kyma.pk])]

    def test_given_lower_case_watched_keys_when_posted_then_accepted(self, listener, kyma, creds):
        body = {
            "watched": {"namespace": "kyma-system", "name": "default"},
            "watchedGvk": {"group": "", "version": "v1", "kind": "Secret"},
        }
        status, _ = request(listener.port, creds.context(), "/v2/lifecycle-manager/event", body)
        assert status == 200

    def test_given_a_v1_event_naming_its_owner_when_posted_then_accepted(self, listener, kyma, creds):
        body = event_body(owner={"Namespace": kyma.namespace, "Name": kyma.name})
        status, answer = request(listener.port, creds.context(), "/v1/lifecycle-manager/event", body)
        assert status == 200, answer

    def test_given_a_v1_event_naming_another_kyma_when_posted_then_403(self, listener, kyma, creds):
        other = KymaFactory(skr_domain="other.kyma.example.com")
        body = event_body(owner={"Namespace": other.namespace, "Name": other.name})
        status, answer = request(listener.port, creds.context(), "/v1/lifecycle-manager/event", body)
        assert status == 403
        assert "other.kyma.example.com" in answer["detail"]

    def test_given_a_heartbeat_when_posted_then_the_kyma_is_seen(self, listener, kyma, creds):
        status, body = request(
            listener.port,
            creds.context(),
            "/watcher/heartbeat",
            {"watcherVersion": "1.0", "queueDepth": 3, "eventsSent": True},
        )
        assert status == 200, body
        kyma.refresh_from_db()
        assert kyma.watcher_last_seen_at is not None
        assert kyma.watcher_report == {"watcherVersion": "1.0", "queueDepth": 3}

    def test_given_a_silent_watcher_when_it_reports_again_then_one_reconcile_is_queued(
        self, listener, kyma, creds, task_queue
    ):
        beside(kyma.pk, watcher_last_seen_at=timezone.now() - dt.timedelta(hours=1))
        flags().started(kyma.pk)  # whatever was queued while setting up has run
        task_queue()
        for _ in range(2):
            status, body = request(listener.port, creds.context(), "/watcher/heartbeat", {"queueDepth": 0})
            assert status == 200, body
        # the second heartbeat finds the watcher heard: no more reconciles
        assert [(t.name, t.args) for t in task_queue()] == [("controlplane.kyma_reconcile", [kyma.pk])]

    def test_given_a_watcher_heard_recently_when_it_reports_then_nothing_is_queued(
        self, listener, kyma, creds, task_queue
    ):
        beside(kyma.pk, watcher_last_seen_at=timezone.now() - dt.timedelta(seconds=30))
        task_queue()
        status, body = request(listener.port, creds.context(), "/watcher/heartbeat", {"queueDepth": 0})
        assert status == 200, body
        assert task_queue() == []
        kyma.refresh_from_db()
        assert timezone.now() - kyma.watcher_last_seen_at < dt.timedelta(seconds=10)

    def test_given_events_when_scraping_the_side_port_then_metrics_moved(self, listener, kyma, creds):
        # The listener writes its totals a moment after it fell idle, so an earlier test's last
        # request may still be on its way into the metrics: start from totals that stay put.
        before = settled_scrape(listener.metrics_port)
        request(listener.port, creds.context(), "/v2/lifecycle-manager/event", event_body())
        request(listener.port, creds.context(), "/v2/lifecycle-manager/event", {"watched": 1})
        big = event_body(padding="x" * 17000)
        request(listener.port, creds.context(), "/v2/lifecycle-manager/event", big)
        expected = {
            'watcher_listener_requests_total{code="200",contract="v2"}': 1,
            'watcher_listener_request_errors_total{code="400"}': 1,
            "watcher_listener_exceeding_size_limit_requests_total": 1,
            "watcher_listener_request_duration_seconds_count": 3,
        }
        # Each series is written on its own: wait until every one of them shows its requests.
        deadline = time.monotonic() + 10
        while True:
            after = scrape(listener.metrics_port)
            moved = {name: after.get(name, 0) - before.get(name, 0) for name in expected}
            if all(moved[name] >= count for name, count in expected.items()):
                break
            assert time.monotonic() < deadline, f"the three requests never showed in the metrics: {moved}"
            time.sleep(0.02)
        assert moved == expected
        assert after["watcher_listener_inflight_requests"] == 0


class TestContractErrors:
    @pytest.mark.parametrize(
        ("raw", "needle"),
        [
            (b"not json", "not JSON"),
            (b"[1, 2]", "JSON object"),
            (b"{}", "watched is required"),
            (b'{"watched": "x", "watchedGvk": {}}', "watched must be an object"),
            (
                b'{"watched": {"Namespace": "a"}, "watchedGvk": {"version": "v1", "kind": "K"}}',
                "watched.name",
            ),
            (
                b'{"watched": {"Name": 5}, "watchedGvk": {"version": "v1", "kind": "K"}}',
                "watched.name must be",
            ),
            (
                b'{"watched": {"Name": "a", "name": "b"}, "watchedGvk": {"version": "v1", "kind": "K"}}',
                "twice",
            ),
            (b'{"watched": {"Name": "a"}}', "watchedGvk must be"),
            (
                b'{"watched": {"Name": "a"}, "watchedGvk": {"group": 1, "version": "v1", "kind": "K"}}',
                "group",
            ),
            (b'{"watched": {"Name": "a"}, "watchedGvk": {"group": "g"}}', "version and watchedGvk.kind"),
            (b"\xff\xfe", "not JSON"),
        ],
    )
    def test_given_a_malformed_body_when_posted_then_400_says_what(self, listener, kyma, creds, raw, needle):
        status, body = request(listener.port, creds.context(), "/v2/lifecycle-manager/event", raw=raw)
        assert status == 400
        assert needle in body["detail"]

    def test_given_v1_without_owner_when_posted_then_400(self, listener, kyma, creds):
        status, body = request(listener.port, creds.context(), "/v1/lifecycle-manager/event", event_body())
        assert status == 400 and "owner is required" in body["detail"]

    @pytest.mark.parametrize(
        ("path", "code", "needle"),
        [
            ("/v3/lifecycle-manager/event", 400, "unsupported contract version 'v3'"),
            ("//lifecycle-manager/event", 400, "unsupported contract version ''"),
            ("/v2//event", 400, "invalid component ''"),
            ("/v2/Bad_Name/event", 400, "invalid component"),
            ("/v2/unknown-component/event", 404, "no Watcher for component 'unknown-component'"),
            ("/v2/lifecycle-manager/other", 404, "no such endpoint"),
            ("/", 404, "no such endpoint"),
        ],
    )
    def test_given_a_bad_path_when_posted_then_400_or_404(self, listener, kyma, creds, path, code, needle):
        status, body = request(listener.port, creds.context(), path, event_body())
        assert status == code
        assert needle in body["detail"]

    @pytest.mark.parametrize("method", ["GET", "PUT", "DELETE", "PATCH"])
    def test_given_another_method_when_sent_then_405(self, listener, kyma, creds, method):
        status, _ = request(
            listener.port, creds.context(), "/v2/lifecycle-manager/event", event_body(), method=method
        )
        assert status == 405

    def test_given_a_body_over_16kib_when_posted_then_413(self, listener, kyma, creds):
        big = event_body(padding="x" * 17000)
        status, body = request(listener.port, creds.context(), "/v2/lifecycle-manager/event", big)
        assert status == 413
        assert "16384" in body["detail"]


class TestForwarding:
    def test_given_another_component_when_posted_then_forwarded_by_a_task(
        self, listener, kyma, creds, task_queue
    ):
        WatcherFactory(
            manager="keda-manager",
            component="keda-manager",
            service_info={"name": "keda-events", "namespace": "kcp-system", "port": 9090},
        )
        task_queue()
        status, body = request(
            listener.port, creds.context(), "/v2/keda-manager/event", event_body(name="my-keda")
        )
        assert status == 200 and body["outcome"] == "forwarded"
        [task] = task_queue()
        assert task.name == "listener.forward_event"
        assert task.args[0] == "http://keda-events.kcp-system.svc.cluster.local:9090/v2/keda-manager/event"
        assert task.args[1]["watched"] == {"Namespace": "kyma-system", "Name": "my-keda"}
