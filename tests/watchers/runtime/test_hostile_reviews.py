"""The runtime watcher answers every review the API server may send like any other (allowed, with the
event sent when the spec changed), however deep the object; anything else gets a 4xx with a JSON
``detail``, and a body over the limit is refused without being read into memory, in a way an
ordinary client reads."""

from __future__ import annotations

import http.client
import json
import socket
import ssl

import pytest

from pki.crypto import certificate_to_pem
from tests.watchers.runtime.support import WEBHOOK_DNS, kyma, review
from watchers.runtime.review import MAX_REVIEW_DEPTH, deep_equal, parse_admission_review

PLACEHOLDER = '"SPEC-PLACEHOLDER"'


def nested(depth: int, leaf: str = "1") -> str:
    """A JSON object ``depth`` levels deep, as text (``json.dumps`` itself recurses)."""
    return '{"x":' * depth + leaf + "}" * depth


def deep_update(name: str, depth: int, *, old_leaf: str = "1", new_leaf: str = "2") -> bytes:
    """An UPDATE of a Kyma whose spec is ``depth`` levels deep; the leaf changes unless equal."""
    old, new = kyma(name, spec="SPEC-PLACEHOLDER"), kyma(name, spec="SPEC-PLACEHOLDER")
    old["metadata"]["resourceVersion"] = "41"
    text = review("UPDATE", new, old).decode()
    first = text.index(PLACEHOLDER)
    text = text[:first] + nested(depth, new_leaf) + text[first + len(PLACEHOLDER) :]
    return text.replace(PLACEHOLDER, nested(depth, old_leaf)).encode()


class TestDeepObjects:
    @pytest.mark.parametrize("depth", [400, 900, 5000, MAX_REVIEW_DEPTH - 5])
    def test_given_a_deep_spec_that_changed_then_allowed_and_the_event_is_sent(
        self, watcher, webhook, listener, depth
    ):
        answer = webhook.review("kyma", deep_update(f"deep-{depth}", depth))

        assert answer["response"]["allowed"] is True
        assert answer["response"]["status"]["message"] == "kcp request succeeded"
        assert listener.wait_for_event(f"deep-{depth}").json["watched"]["Name"] == f"deep-{depth}"

    @pytest.mark.parametrize("depth", [900, 5000])
    def test_given_a_deep_spec_that_did_not_change_then_allowed_without_an_event(
        self, watcher, webhook, depth
    ):
        answer = webhook.review("kyma", deep_update(f"same-{depth}", depth, new_leaf="1"))

        assert answer["response"]["allowed"] is True
        assert answer["response"]["status"]["message"].startswith("no change detected")

    def test_given_deeper_than_any_api_server_sends_then_400_json(self, watcher, webhook):
        status, headers, data = webhook.request(
            "POST", "/validate/kyma", deep_update("abyss", MAX_REVIEW_DEPTH + 5)
        )

        assert status == 400
        assert headers["Content-Type"] == "application/json"
        assert f"nested deeper than {MAX_REVIEW_DEPTH:,} levels" in json.loads(data)["detail"]

    def test_given_numbers_beyond_float64_then_compared_as_go_would(self):
        assert deep_equal({"n": 10**400}, {"n": 10**401})  # both +Inf as float64
        request = parse_admission_review(deep_update("big", 3, old_leaf="9" * 5000, new_leaf="1"))
        assert request.operation == "UPDATE"


class TestErrorAnswers:
    @pytest.mark.parametrize(
        ("body", "status"),
        [(b"not json", 400), (b"[]", 400), (b'{"kind": "AdmissionReview"}', 400), (b"[" * 200_000, 400)],
    )
    def test_given_a_body_that_is_no_review_then_4xx_with_a_json_detail(self, watcher, webhook, body, status):
        got, headers, data = webhook.request("POST", "/validate/kyma", body)

        assert got == status
        assert headers["Content-Type"] == "application/json"
        assert json.loads(data)["detail"]


def test_given_a_body_over_the_limit_then_an_ordinary_client_reads_a_413(start_watcher, pki):
    """http.client sends the whole body before reading the answer, as requests does: the watcher
    reads the rest and throws it away, so the client gets the answer, not a reset."""
    server = start_watcher(max_request_bytes=4096)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(cadata=certificate_to_pem(pki.ca_old.certificate).decode())
    conn = http.client.HTTPSConnection(WEBHOOK_DNS, server.webhook_port, context=context, timeout=10)
    conn._create_connection = lambda address, timeout=None, source=None: socket.create_connection(  # type: ignore[attr-defined]
        ("127.0.0.1", server.webhook_port), timeout
    )
    try:
        conn.request("POST", "/validate/kyma", body=b"x" * (8 * 1024 * 1024))
        response = conn.getresponse()
        assert response.status == 413
        assert "larger than 4096 bytes" in json.loads(response.read())["detail"]
    finally:
        conn.close()
