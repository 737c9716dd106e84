"""A body nested too deep is a malformed body: 400 in the listener's error shape, never a 500."""

from __future__ import annotations

import json
from urllib.parse import quote

import pytest

from tests.factories import KymaFactory
from tests.support.listener import (
    Credentials,
    event_body,
    listener_for_test,
    module_listener,
    request,
)

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

DEEP = 8_000  # past the interpreter's recursion limit, inside the 16 KiB body limit


@pytest.fixture(scope="module")
def running(django_db_setup, django_db_blocker):
    started = module_listener(django_db_blocker, mode="proxy", trusted_proxies="127.0.0.0/8,::1")
    yield started
    started[0].stop()


@pytest.fixture
def post(running):
    listener = listener_for_test(running)
    kyma = KymaFactory(runtime_id="rt-deep", skr_domain="rt-deep.kyma.example.com")
    header = {"X-Forwarded-Client-Cert": f"Cert={quote(Credentials.for_kyma(kyma).cert.decode(), safe='')}"}

    def send(path: str, raw: bytes) -> tuple[int, object]:
        return request(listener.port, None, path, raw=raw, headers=header)

    return send


@pytest.mark.parametrize("path", ["/v2/lifecycle-manager/event", "/watcher/heartbeat"])
def test_given_a_body_past_the_recursion_limit_when_posted_then_400_saying_why(post, path):
    status, body = post(path, b"[" * DEEP + b"]" * DEEP)
    assert (status, body) == (400, {"detail": "body: document nested deeper than 100 levels", "errors": []})


def test_given_a_valid_event_with_a_field_nested_past_the_limit_when_posted_then_400(post):
    deep = json.loads("[" * 101 + "]" * 101)
    status, body = post("/v2/lifecycle-manager/event", json.dumps(event_body(extra=deep)).encode())
    assert status == 400 and "nested deeper than 100 levels" in body["detail"]


def test_given_a_valid_event_with_ordinary_nesting_then_still_accepted(post):
    status, body = post("/v2/lifecycle-manager/event", json.dumps(event_body(extra=[[[{"a": 1}]]])).encode())
    assert status == 200, body
