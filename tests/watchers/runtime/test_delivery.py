"""Delivery to the control plane: pooling, retries with backoff, coalescing, dropping, CA bundles."""

from __future__ import annotations

import itertools
import logging

from pki.crypto import certificate_to_pem
from tests.watchers.runtime.support import (
    TlsFiles,
    WebhookClient,
    create,
    event_body,
    kyma,
    metric,
    review,
    scrape,
    scrape_when,
    settled,
    upstream_part,
    wait_until,
)


def test_events_share_one_pooled_tls_connection(watcher, webhook, listener):
    for i in range(25):
        webhook.review("kyma", create(f"pooled-{i}"))
    listener.wait_for_event("pooled-24")
    assert len(listener.events()) == 25
    assert listener.connections == 1
    assert {r.connection for r in listener.events()} == {1}
    samples = settled(watcher.metrics_port)
    assert metric(samples, "watcher_kcp_connections_total") == 1
    assert metric(samples, "watcher_kcp_connected") == 1
    assert metric(samples, "watcher_events_sent_total") == 25


def test_without_keep_alive_every_event_pays_a_handshake(start_watcher, client_for, listener):
    server = start_watcher(kcp_keep_alive=False)
    client = client_for(server)
    for i in range(5):
        client.review("kyma", create(f"single-{i}"))
    listener.wait_for_event("single-4")
    assert listener.connections == 5


def test_failed_sends_are_retried_with_growing_backoff_then_delivered(start_watcher, client_for, listener):
    listener.fail_next_events = 4
    server = start_watcher(backoff_initial=0.04, backoff_max=1.0)
    client_for(server).review("kyma", create("retried"))
    wait_until(lambda: metric(scrape(server.metrics_port), "watcher_events_sent_total") == 1)
    attempts = listener.events()
    assert [upstream_part(r.body) for r in attempts] == [event_body("retried")] * 5
    assert len({r.body for r in attempts}) == 1  # the same change each time
    gaps = [b.at - a.at for a, b in itertools.pairwise(attempts)]
    # equal jitter: attempt n waits in [cap/2, cap] with cap = 0.04 * 2**(n-1)
    assert gaps[0] >= 0.02 * 0.9
    assert gaps[2] > gaps[0]
    assert gaps[3] > gaps[1]
    samples = scrape(server.metrics_port)
    assert metric(samples, "watcher_kcp_requests_total") == 5
    assert metric(samples, "watcher_failed_kcp_total", error_reason="failed-request") == 4
    assert metric(samples, "watcher_events_failed_total", reason="http-500") == 4
    assert metric(samples, "watcher_send_queue_depth") == 0
    assert listener.connections == 1  # an HTTP error does not cost the connection


def test_a_503_with_retry_after_is_retried_after_that_wait_not_the_backoff(
    start_watcher, client_for, listener
):
    """The control plane's queue was away (503): it says when to come back, sooner than the
    backoff would; the retry waits that long (spread up to half again), never less."""
    listener.event_status, listener.retry_after = 503, "0.2"
    server = start_watcher(backoff_initial=20.0, backoff_max=30.0)
    client_for(server).review("kyma", create("queue-away"))
    wait_until(lambda: len(listener.events()) >= 2)
    listener.event_status = 200
    wait_until(lambda: metric(scrape(server.metrics_port), "watcher_events_sent_total") == 1)
    first, second = listener.events()[:2]
    assert 0.2 * 0.9 <= second.at - first.at < 10.0  # the exponential backoff would wait 10-20 s
    assert metric(scrape(server.metrics_port), "watcher_events_failed_total", reason="http-503") >= 1


def test_only_200_counts_as_success(start_watcher, client_for, listener):
    listener.event_status = 202
    server = start_watcher()
    client_for(server).review("kyma", create("accepted-is-not-ok"))
    wait_until(lambda: len(listener.events()) >= 2)
    listener.event_status = 200
    wait_until(lambda: metric(scrape(server.metrics_port), "watcher_events_sent_total") == 1)
    assert metric(scrape(server.metrics_port), "watcher_events_failed_total", reason="http-202") >= 1


def test_permanent_rejection_drops_the_event_and_sending_goes_on(start_watcher, client_for, listener):
    listener.event_status = 404  # e.g. a component the listener does not know
    server = start_watcher(backoff_initial=0.04, backoff_max=1.0)
    client = client_for(server)
    client.review("kyma", create("unknown-component"))
    wait_until(
        lambda: (
            metric(scrape(server.metrics_port), "watcher_events_dropped_total", reason="rejected-404") == 1
        )
    )
    listener.event_status = 200
    client.review("kyma", create("after-rejection"))
    listener.wait_for_event("after-rejection")
    assert listener.event_names().count("unknown-component") == 1  # sent once, never retried
    samples = settled(server.metrics_port)
    assert metric(samples, "watcher_send_queue_depth") == 0
    assert metric(samples, "watcher_events_sent_total") == 1


def test_listener_down_then_back_up(watcher, webhook, listener):
    listener.down()
    webhook.review("kyma", create("while-down"))
    wait_until(
        lambda: metric(scrape(watcher.metrics_port), "watcher_events_failed_total", reason="connect") >= 2
    )
    assert watcher.queue_depth == 1
    listener.up()
    listener.wait_for_event("while-down")
    wait_until(lambda: metric(scrape(watcher.metrics_port), "watcher_send_queue_depth") == 0)
    samples = scrape(watcher.metrics_port)
    assert metric(samples, "watcher_events_sent_total") == 1
    assert metric(samples, "watcher_failed_kcp_total", error_reason="failed-request") >= 2


def test_connection_closed_without_answer_is_retried_on_a_new_connection(watcher, webhook, listener):
    webhook.review("kyma", create("before-close"))
    listener.wait_for_event("before-close")
    listener.mode = "close"
    webhook.review("kyma", create("during-close"))
    wait_until(
        lambda: metric(scrape(watcher.metrics_port), "watcher_events_failed_total", reason="connection-lost")
    )
    listener.mode = "ok"
    wait_until(lambda: metric(scrape(watcher.metrics_port), "watcher_events_sent_total") == 2)
    assert listener.connections >= 2


def test_stale_pooled_connection_is_replaced_silently(watcher, webhook, listener):
    """The listener restarting between events closes the idle pooled connection: no failure counted."""
    webhook.review("kyma", create("first"))
    listener.wait_for_event("first")
    listener.down()
    listener.up()
    webhook.review("kyma", create("second"))
    listener.wait_for_event("second")
    samples = settled(watcher.metrics_port)
    assert metric(samples, "watcher_events_sent_total") == 2
    assert sum(v for (name, _), v in samples.items() if name == "watcher_events_failed_total") == 0
    assert metric(samples, "watcher_kcp_connections_total") == 2


def failures(samples: dict) -> float:
    return sum(v for (name, _), v in samples.items() if name == "watcher_events_failed_total")


def test_identical_pending_events_are_coalesced(watcher, webhook, listener):
    listener.down()
    spec_change = lambda n: review("UPDATE", kyma("hot", spec={"n": n}), kyma("hot", spec={"n": n - 1}))  # noqa: E731
    for n in range(1, 6):
        assert (
            webhook.review("kyma", spec_change(n))["response"]["status"]["message"] == "kcp request succeeded"
        )
    webhook.review("kyma", create("cold"))
    assert watcher.queue_depth == 2
    failed_before = failures(scrape(watcher.metrics_port))
    listener.up()
    listener.wait_for_event("cold")
    webhook.review("kyma", create("sentinel"))
    listener.wait_for_event("sentinel")
    samples = settled(watcher.metrics_port)
    # One delivery of the five; one more only for an attempt the sender counted as failed after
    # the listener had it (its answer came too late on a loaded machine: at least once).
    retried = failures(samples) - failed_before
    assert 1 <= listener.event_names().count("hot") <= 1 + retried
    assert metric(samples, "watcher_events_coalesced_total") == 4
    assert metric(samples, "watcher_events_queued_total") == 3


def test_queue_full_drops_new_events_and_counts_them(start_watcher, client_for, listener):
    listener.down()
    server = start_watcher(send_queue_size=3)
    client = client_for(server)
    messages = [client.review("kyma", create(f"q-{i}"))["response"]["status"]["message"] for i in range(5)]
    assert messages[:3] == ["kcp request succeeded"] * 3
    assert all(m.startswith("kcp request failed") for m in messages[3:])
    assert "queue full" in messages[3]
    # an identical event is still accepted: it merges into the pending one instead of needing a slot
    assert client.review("kyma", create("q-0"))["response"]["status"]["message"] == "kcp request succeeded"
    samples = scrape(server.metrics_port)
    assert metric(samples, "watcher_events_dropped_total", reason="queue-full") == 2
    assert metric(samples, "watcher_send_queue_depth") == 3
    assert metric(samples, "watcher_send_queue_capacity") == 3
    listener.up()
    wait_until(lambda: len(set(listener.event_names())) == 3)
    assert sorted(set(listener.event_names())) == ["q-0", "q-1", "q-2"]


def test_ca_bundle_with_several_cas_and_untrusted_listener(
    start_watcher, client_for, listener, pki, tmp_path
):
    # Default wiring: listener certificate from the *second* CA of the bundle -> works.
    trusted = start_watcher()
    client_for(trusted).review("kyma", create("via-second-ca"))
    listener.wait_for_event("via-second-ca")
    # Bundle with only the first CA: the listener cannot be verified, nothing is delivered.
    only_old = TlsFiles.write(tmp_path / "only-old", certificate_to_pem(pki.ca_old.certificate), pki.runtime)
    untrusting = start_watcher(files=only_old)
    client_for(untrusting).review("kyma", create("via-first-ca-only"))
    wait_until(
        lambda: metric(scrape(untrusting.metrics_port), "watcher_events_failed_total", reason="tls") >= 1
    )
    assert "via-first-ca-only" not in listener.event_names()


def test_hostname_is_verified(start_watcher, client_for, listener):
    # 127.0.0.1 is not in the listener certificate (only "localhost" is)
    server = start_watcher(kcp_addr=f"127.0.0.1:{listener.port}")
    client_for(server).review("kyma", create("wrong-name"))
    wait_until(lambda: metric(scrape(server.metrics_port), "watcher_events_failed_total", reason="tls") >= 1)
    assert listener.events() == []


def test_client_certificate_from_unknown_ca_is_refused_by_listener(start_watcher, listener, pki, tmp_path):
    server = start_watcher(files=TlsFiles.write(tmp_path / "stranger", pki.bundle_pem, pki.stranger))
    client = WebhookClient(server.webhook_port, certificate_to_pem(pki.rogue_ca.certificate))
    try:
        client.review("kyma", create("stranger-event"))
    finally:
        client.close()
    wait_until(lambda: listener.handshake_failures >= 1)
    # the refusal is counted once the TLS alert is read, a moment after the attempt was counted
    samples = scrape_when(
        server.metrics_port,
        lambda s: sum(v for (name, _), v in s.items() if name == "watcher_events_failed_total") >= 1,
    )
    assert metric(samples, "watcher_kcp_requests_total") >= 1
    assert metric(samples, "watcher_events_sent_total") == 0
    assert listener.events() == []


def test_heartbeats_carry_counters_over_the_pooled_connection(start_watcher, client_for, listener):
    server = start_watcher(heartbeat_interval=0.15, watcher_version="9.9.9")
    client_for(server).review("kyma", create("beat"))
    listener.wait_for_event("beat")
    wait_until(lambda: len(listener.heartbeats()) >= 3, timeout=3)
    last = listener.heartbeats()[-1]
    body = last.json
    assert set(body) == {
        "watcherVersion",
        "startedAt",
        "queueDepth",
        "eventsSent",
        "eventsFailed",
        "eventsDropped",
    }
    assert body["watcherVersion"] == "9.9.9"
    assert body["startedAt"].endswith("Z")
    assert body["startedAt"][:4].isdigit()
    assert (body["queueDepth"], body["eventsSent"], body["eventsFailed"], body["eventsDropped"]) == (
        0,
        1,
        0,
        0,
    )
    assert last.headers["Content-Type"] == "application/json"
    assert last.client_cn == "runtime-1"
    assert {r.connection for r in listener.requests} == {1}
    # The listener has the third heartbeat a moment before the watcher counts its answer.
    wait_until(
        lambda: metric(scrape(server.metrics_port), "watcher_heartbeats_total", result="success") >= 3,
        timeout=3,
    )


def test_heartbeat_404_is_tolerated_and_logged_once(start_watcher, client_for, listener, caplog):
    caplog.set_level(logging.INFO, logger="watchers.runtime")
    listener.heartbeat_status = 404
    server = start_watcher(heartbeat_interval=0.1)
    wait_until(lambda: len(listener.heartbeats()) >= 3, timeout=3)
    client_for(server).review("kyma", create("after-404"))
    listener.wait_for_event("after-404")
    samples = settled(server.metrics_port)
    assert metric(samples, "watcher_heartbeats_total", result="unsupported") >= 3
    assert metric(samples, "watcher_heartbeats_total", result="failed") == 0
    assert sum(v for (name, _), v in samples.items() if name == "watcher_events_failed_total") == 0
    notes = [r for r in caplog.records if "no heartbeat endpoint" in r.getMessage()]
    assert len(notes) == 1


def test_heartbeat_failures_are_counted(start_watcher, listener):
    listener.heartbeat_status = 503
    server = start_watcher(heartbeat_interval=0.1)
    wait_until(lambda: metric(scrape(server.metrics_port), "watcher_heartbeats_total", result="failed") >= 2)
