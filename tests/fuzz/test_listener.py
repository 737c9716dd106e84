"""The real listener (gunicorn, our PKI), in direct mode (mutual TLS) and in proxy mode
(X-Forwarded-Client-Cert), fuzzed with events and heartbeats as a hostile or broken watcher
would send them: field names in any case, values of any type, huge numbers, NUL characters,
lone surrogates, garbage bytes, odd paths and methods, any Host header (the listener names the
client by its certificate and builds nothing from the Host, so it never refuses one).

Invariants: never a 5xx; every error is JSON with a ``detail``; the listener still accepts a good
event afterwards; and the event records hold exactly the accepted events (a refused event is
never recorded, and no accepted one is lost to a poisoned recorder)."""

from __future__ import annotations

import json
import time
from urllib.parse import quote

import pytest
from django.db.models import Sum
from hypothesis import given
from hypothesis import strategies as st

from listener.models import WatchEventRecord
from tests.factories import KymaFactory
from tests.fuzz.conftest import count
from tests.fuzz.test_documents import texts, values
from tests.support.listener import Credentials, event_body, listener_for_test, module_listener
from tests.support.listener import request as http_request

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

FIELDS = ["watched", "Watched", "WATCHED", "watchedGvk", "WatchedGvk", "watchedgvk", "owner", "change", "x"]
INNER = ["Namespace", "namespace", "NAME", "Name", "group", "Version", "kind", "KIND", "operation", "uid"]
inner = st.dictionaries(st.one_of(st.sampled_from(INNER), texts), st.one_of(texts, values), max_size=4)
events = st.dictionaries(st.one_of(st.sampled_from(FIELDS), texts), st.one_of(inner, values), max_size=4)
# What an HTTP client can put in a header: latin-1, no line breaks.
header_values = st.text(
    alphabet=st.characters(min_codepoint=32, max_codepoint=255, blacklist_characters="\x7f"), max_size=60
)
PATHS = [
    "/v2/lifecycle-manager/event",
    "/v1/lifecycle-manager/event",
    "/v2/no-such-component/event",
    "/v3/lifecycle-manager/event",
    "/watcher/heartbeat",
    "/v2//event",
    "/v2/Lifecycle_Manager/event",
    "/",
    "/v2/lifecycle-manager/event/extra",
]


@pytest.fixture(scope="module", params=["direct", "proxy"])
def running(request, django_db_setup, django_db_blocker):
    options = {"mode": request.param}
    if request.param == "proxy":
        options["trusted_proxies"] = "127.0.0.0/8"
    started = module_listener(django_db_blocker, **options)
    yield request.param, started
    started[0].stop()


def send(
    mode: str,
    port: int,
    creds: Credentials,
    path: str,
    raw: bytes,
    method: str = "POST",
    xfcc: str | None = None,
    host: str | None = None,
):
    headers = {} if host is None else {"Host": host}
    if mode == "proxy":
        headers["X-Forwarded-Client-Cert"] = (
            xfcc if xfcc is not None else f'Hash=x;Cert="{quote(creds.cert.decode(), safe="")}"'
        )
        return http_request(port, None, path, raw=raw, method=method, headers=headers)
    return http_request(port, creds.context(), path, raw=raw, method=method, headers=headers)


def test_the_listener_takes_anything(running, door):
    mode, started = running
    door(f"listener-{mode}")
    listener = listener_for_test(started)
    creds = Credentials.for_kyma(KymaFactory(runtime_id="rt-fuzz", skr_domain="rt-fuzz.kyma.example.com"))
    accepted = 0

    @given(
        body=st.one_of(events.map(lambda e: json.dumps(e).encode()), st.binary(max_size=64)),
        path=st.one_of(
            st.sampled_from(PATHS), st.text(alphabet="/abcv12-_.%", max_size=30).map(lambda p: "/" + p)
        ),
        method=st.sampled_from(["POST", "POST", "POST", "GET", "PUT"]),
        xfcc=st.one_of(
            st.none(), st.sampled_from(["", "Cert=", 'Cert="garbage"', "x" * 40_000]), header_values
        ),
        host=st.one_of(st.none(), st.sampled_from(["evil.example", "", "a b", "x" * 300]), header_values),
    )
    def run(body, path, method, xfcc, host):
        nonlocal accepted
        count(f"listener-{mode}")
        status, answer = send(
            mode, listener.port, creds, path, body, method, xfcc if mode == "proxy" else None, host
        )
        assert status < 500, answer
        assert isinstance(answer, dict), answer
        if status == 200:
            accepted += "event" in path
        else:
            assert isinstance(answer.get("detail"), str) and answer["detail"]
        good, reply = send(
            mode, listener.port, creds, "/v2/lifecycle-manager/event", json.dumps(event_body()).encode()
        )
        assert good == 200, reply  # still answers
        accepted += 1

    run()
    deadline = time.monotonic() + 10
    while (WatchEventRecord.objects.aggregate(n=Sum("count"))["n"] or 0) < accepted:
        assert time.monotonic() < deadline, "accepted events were not all recorded"
        time.sleep(0.05)
    assert WatchEventRecord.objects.aggregate(n=Sum("count"))["n"] == accepted  # and no refused one
