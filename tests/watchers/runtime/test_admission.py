"""The webhook over real TLS: upstream's scenario matrix end to end, answers, malformed input."""

from __future__ import annotations

import json
import logging
import socket
import ssl
import time

import pytest

from pki.crypto import certificate_to_pem
from tests.watchers.runtime.conftest import make_config
from tests.watchers.runtime.fake_kcp import FakeListener
from tests.watchers.runtime.support import (
    WEBHOOK_DNS,
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
from tests.watchers.runtime.test_review import NOT_SENT, SCENARIOS
from watchers.runtime import WatcherServer


@pytest.fixture(scope="module")
def shared(tmp_path_factory, pki):
    """One listener + watcher for the 16-case matrix (starting one per case would cost seconds)."""
    tmp = tmp_path_factory.mktemp("matrix")
    listener = FakeListener(
        tmp / "listener", pki.listener, certificate_to_pem(pki.ca_old.certificate)
    ).start()
    server = WatcherServer(
        make_config(TlsFiles.write(tmp / "tls", pki.bundle_pem, pki.runtime), listener.addr)
    )
    server.start()
    client = WebhookClient(server.webhook_port, certificate_to_pem(pki.ca_old.certificate))
    yield listener, server, client
    client.close()
    server.stop(flush_timeout=0.2)
    listener.down()


def named_review(operation: str, scenario: str, name: str) -> bytes:
    old, new, sub_resource = SCENARIOS[scenario]
    rename = lambda obj: {**obj, "metadata": {**obj["metadata"], "name": name}}  # noqa: E731
    if operation == "CREATE":
        return review("CREATE", rename(new), sub_resource=sub_resource)
    if operation == "DELETE":
        return review("DELETE", None, rename(old), sub_resource=sub_resource)
    if operation == "CONNECT":
        return review("CONNECT", {"kind": "PodExecOptions", "apiVersion": "v1"}, sub_resource=sub_resource)
    return review("UPDATE", rename(new), rename(old), sub_resource=sub_resource)


@pytest.mark.parametrize("scenario", list(SCENARIOS))
@pytest.mark.parametrize("operation", ["CREATE", "UPDATE", "DELETE", "CONNECT"])
def test_scenario_matrix_over_https(shared, operation, scenario):
    listener, _, client = shared
    name = f"{operation}-{scenario}".lower()
    answer = client.review("kyma", named_review(operation, scenario, name))
    expected = NOT_SENT.get((operation, scenario), "kcp request succeeded").replace("/k", f"/{name}")
    assert answer["response"]["allowed"] is True
    assert answer["response"]["status"] == {"metadata": {}, "status": "Success", "message": expected}
    # The queue is FIFO over one connection: once a later sentinel arrived, the case's event would have too.
    sentinel = f"sentinel-{name}"
    client.review("kyma", create(sentinel))
    listener.wait_for_event(sentinel)
    sent = [r for r in listener.events() if r.json["watched"]["Name"] == name]
    if (operation, scenario) in NOT_SENT:
        assert sent == []
    else:
        assert [(r.path, upstream_part(r.body), r.headers["Content-Type"]) for r in sent] == [
            ("/v2/kyma/event", event_body(name), "application/json")
        ]
        assert sent[0].json["change"]["operation"] == operation  # ours, after upstream's fields
        assert sent[0].client_cn == "runtime-1"  # mTLS with the runtime certificate


def test_response_headers_uid_and_one_log_line(watcher, webhook, caplog):
    caplog.set_level(logging.INFO, logger="watchers.runtime")
    body = review("UPDATE", kyma("same", spec={"a": 1}), kyma("same", spec={"a": 1}), uid="uid-42")
    status, headers, data = webhook.request("POST", "/validate/lifecycle-manager", body)
    assert status == 200
    assert headers["Strict-Transport-Security"] == "max-age=31536000; includeSubDomains"
    assert headers["Content-Security-Policy"] == "default-src 'self'"
    assert headers["Content-Type"] == "application/json"
    answer = json.loads(data)
    assert (answer["apiVersion"], answer["kind"], answer["response"]["uid"]) == (
        "admission.k8s.io/v1",
        "AdmissionReview",
        "uid-42",
    )
    lines = [r for r in caplog.records if r.getMessage() == "admission reviewed"]
    assert len(lines) == 1
    assert lines[0].fields["message"] == "no change detected on watched resource kyma-system/same"
    assert lines[0].fields["uid"] == "uid-42"
    assert lines[0].fields["component"] == "lifecycle-manager"


def test_v1beta1_review_is_answered_in_kind(webhook):
    answer = webhook.review("kyma", review("CREATE", kyma("b1"), api_version="admission.k8s.io/v1beta1"))
    assert answer["apiVersion"] == "admission.k8s.io/v1beta1"


def test_other_subresource_is_not_sent_and_counted_like_upstream(watcher, webhook, listener):
    old, new = kyma("scaled", spec={"replicas": 1}), kyma("scaled", spec={"replicas": 2})
    answer = webhook.review("kyma", review("UPDATE", new, old, sub_resource="scale"))
    assert (
        answer["response"]["status"]["message"] == "invalid subresource: watched resource kyma-system/scaled"
    )
    webhook.review("kyma", create("after-scale"))
    listener.wait_for_event("after-scale")
    assert "scaled" not in listener.event_names()
    samples = settled(watcher.metrics_port)
    assert metric(samples, "watcher_failed_kcp_total", error_reason="invalid-subresource") == 1


MALFORMED = [
    ("POST", "/validate/kyma", b"{not json", 400, "not valid JSON"),
    ("POST", "/validate/kyma", b'{"kind":"Pod","apiVersion":"v1"}', 400, "kind must be 'AdmissionReview'"),
    (
        "POST",
        "/validate/kyma",
        b'{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1"}',
        400,
        "no request",
    ),
    ("POST", "/validate/", create("x"), 400, "component name must not be empty"),
    ("POST", "/validate/a/b", create("x"), 400, "invalid component name"),
    ("POST", "/elsewhere", create("x"), 404, "expected /validate/<component>"),
    ("GET", "/validate/kyma", b"", 405, "method GET not allowed"),
    ("PUT", "/validate/kyma", create("x"), 405, "method PUT not allowed"),
    ("BREW", "/validate/kyma", b"", 405, "method BREW not allowed"),
]


@pytest.mark.parametrize(("method", "path", "body", "status", "reason"), MALFORMED)
def test_malformed_requests_get_4xx_with_reason(watcher, client_for, method, path, body, status, reason):
    client = client_for(watcher)
    got_status, headers, data = client.request(method, path, body)
    assert got_status == status
    assert reason in data.decode()
    samples = scrape(watcher.metrics_port)
    assert metric(samples, "watcher_admission_request_error_total") == 1
    assert metric(samples, "watcher_admission_request_total") == 1
    if path == "/validate/kyma" and method == "POST":
        # the body was read: the same keep-alive connection carries the next review
        assert headers["Connection"] is None
        assert client.review("kyma", create("same-connection"))["response"]["allowed"] is True
    else:
        # rejected before reading the body: the stream cannot be trusted and is closed
        assert headers["Connection"] == "close"
        assert client_for(watcher).review("kyma", create("still-alive"))["response"]["allowed"] is True


def test_oversized_body_gets_413(start_watcher, client_for):
    server = start_watcher(max_request_bytes=2048)
    status, _, data = client_for(server).request("POST", "/validate/kyma", b"x" * 4096)
    assert status == 413
    assert b"larger than 2048" in data


def test_chunked_body_is_accepted(watcher, webhook):
    body = create("chunked")
    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    status, _, data = webhook.request(
        "POST",
        "/validate/kyma",
        chunked,
        headers={"Transfer-Encoding": "chunked", "Content-Type": "application/json"},
    )
    assert status == 200
    assert json.loads(data)["response"]["status"]["message"] == "kcp request succeeded"


def test_keep_alive_serves_many_reviews_on_one_connection(watcher, webhook):
    for i in range(20):
        webhook.review("kyma", create(f"ka-{i}"))
        if i == 0:
            first_socket = webhook.conn.sock
    assert webhook.conn.sock is first_socket


def test_tls_is_1_3_only_and_serves_the_runtime_certificate(watcher, pki):
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(cadata=certificate_to_pem(pki.ca_old.certificate).decode())
    context.maximum_version = ssl.TLSVersion.TLSv1_2
    address = ("127.0.0.1", watcher.webhook_port)
    with socket.create_connection(address) as raw, pytest.raises(ssl.SSLError):
        context.wrap_socket(raw, server_hostname=WEBHOOK_DNS)
    context.maximum_version = ssl.TLSVersion.TLSv1_3
    with context.wrap_socket(socket.create_connection(address), server_hostname=WEBHOOK_DNS) as tls:
        assert tls.version() == "TLSv1.3"
    wait_until(lambda: metric(scrape(watcher.metrics_port), "watcher_tls_handshake_errors_total") == 1)


def test_admission_in_flight_gauge_moves(watcher, pki):
    """A request whose body is still arriving is in flight; the gauge shows it, then drops back."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(cadata=certificate_to_pem(pki.ca_old.certificate).decode())
    body = create("slow")
    raw = socket.create_connection(("127.0.0.1", watcher.webhook_port))
    with context.wrap_socket(raw, server_hostname=WEBHOOK_DNS) as tls:
        head = f"POST /validate/kyma HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n".encode()
        tls.sendall(head + body[:10])
        wait_until(lambda: metric(scrape(watcher.metrics_port), "watcher_admission_in_flight") == 1)
        tls.sendall(body[10:])
        assert tls.recv(65536).startswith(b"HTTP/1.1 200 ")
    wait_until(lambda: metric(scrape(watcher.metrics_port), "watcher_admission_in_flight") == 0)


def test_admission_answers_fast_while_control_plane_is_down(watcher, webhook, listener):
    listener.down()
    started = time.monotonic()
    for i in range(5):
        assert (
            webhook.review("kyma", create(f"down-{i}"))["response"]["status"]["message"]
            == "kcp request succeeded"
        )
    assert time.monotonic() - started < 1.0  # upstream would retry inside each admission call
    assert watcher.queue_depth == 5


def test_healthz_and_metrics_endpoints(watcher):
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{watcher.metrics_port}/healthz", timeout=5) as response:
        assert (response.status, response.read()) == (200, b"ok\n")
    with urllib.request.urlopen(f"http://127.0.0.1:{watcher.metrics_port}/metrics", timeout=5) as response:
        assert response.headers["Content-Type"].startswith("text/plain")
        assert b"watcher_admission_request_total" in response.read()


def test_metrics_move_with_traffic(watcher, webhook, listener):
    before = scrape(watcher.metrics_port)
    assert metric(before, "watcher_admission_request_total") == 0
    assert metric(before, "watcher_request_duration") == 0
    webhook.review("kyma", create("counted"))
    webhook.review("kyma", review("CONNECT", {"kind": "PodExecOptions"}))
    webhook.request("POST", "/validate/kyma", b"garbage")
    listener.wait_for_event("counted")
    after = scrape_when(watcher.metrics_port, lambda s: metric(s, "watcher_events_sent_total") == 1)
    assert metric(after, "watcher_admission_request_total") == 3
    assert metric(after, "watcher_admission_request_error_total") == 1
    assert metric(after, "watcher_admission_duration_seconds_count", code="200") == 2
    assert metric(after, "watcher_admission_duration_seconds_count", code="400") == 1
    assert metric(after, "watcher_request_duration") > 0
    assert metric(after, "watcher_kcp_requests_total") == 1
    assert metric(after, "watcher_events_queued_total") == 1
    assert metric(after, "watcher_kcp_request_duration_seconds_count", endpoint="event") == 1
    assert metric(after, "watcher_kcp_request_duration_seconds_sum", endpoint="event") > 0
    assert metric(after, "watcher_send_queue_depth") == 0
    assert metric(after, "watcher_build_info", version="0.1.0") == 1
