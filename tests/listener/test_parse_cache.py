"""Parsed WatchEvents remembered by their body's bytes: every check still runs on every body that is
new to the process, a refused body is refused every time, and the memory is bounded."""

from __future__ import annotations

import io
import json

import pytest

from listener import app, events
from listener.events import CACHED_BODY, PARSED_KEPT, EventInvalid, parse_event_cached
from listener.identity import ClientIdentity
from tests.factories import KymaFactory

PATH = "/v2/lifecycle-manager/event"
GOOD = (
    b'{"watched": {"Namespace": "kyma-system", "Name": "default"}, '
    b'"watchedGvk": {"group": "operator.kyma-project.io", "version": "v1beta2", "kind": "Kyma"}}'
)
# The same object twice, in two spellings Go's decoder would both take: ambiguous, so 400.
TWICE = (
    b'{"watched": {"Namespace": "kyma-system", "Name": "default"}, "Watched": {"Name": "other"}, '
    b'"watchedGvk": {"group": "operator.kyma-project.io", "version": "v1beta2", "kind": "Kyma"}}'
)


@pytest.fixture(autouse=True)
def empty_cache():
    events._parsed.cache_clear()
    yield
    events._parsed.cache_clear()


class _Connection:
    """What gunicorn hands the application as ``gunicorn.socket`` once the peer is known."""

    def __init__(self, identity: ClientIdentity) -> None:
        self.controlplane_identity = identity


def _post(connection: _Connection, body: bytes) -> tuple[str, dict]:
    environ = {
        "REQUEST_METHOD": "POST",
        "PATH_INFO": PATH,
        "CONTENT_LENGTH": str(len(body)),
        "wsgi.input": io.BytesIO(body),
        "gunicorn.socket": connection,
    }
    answer: dict = {}
    payload = b"".join(app.application(environ, lambda status, headers: answer.update(status=status)))
    return answer["status"], json.loads(payload)


@pytest.mark.django_db(transaction=True)
def test_given_the_same_bad_body_twice_then_both_get_the_400_with_its_detail():
    kyma = KymaFactory(runtime_id="rt-cache", skr_domain="rt-cache.kyma.example.com")
    connection = _Connection(ClientIdentity(kyma.runtime_id, (kyma.skr_domain,), "-", ""))

    first = _post(connection, TWICE)
    second = _post(connection, TWICE)

    assert first[0].startswith("400"), first
    assert second == first
    assert "given twice" in second[1]["detail"]


def test_given_a_good_body_again_then_the_event_parsed_the_first_time_is_used():
    first = parse_event_cached("v2", "lifecycle-manager", GOOD)

    again = parse_event_cached("v2", "lifecycle-manager", bytes(bytearray(GOOD)))  # equal, not the same

    assert again is first
    assert events._parsed.cache_info().hits == 1


def test_given_a_body_changed_by_one_byte_then_it_is_parsed_and_checked_anew():
    parse_event_cached("v2", "lifecycle-manager", GOOD)

    renamed = parse_event_cached("v2", "lifecycle-manager", GOOD.replace(b'"default"', b'"defaulT"'))
    with pytest.raises(EventInvalid, match=r"watchedGvk\.version and watchedGvk\.kind are required"):
        parse_event_cached("v2", "lifecycle-manager", GOOD.replace(b'"kind"', b'"kinx"'))

    assert renamed.watched.name == "defaulT"


def test_given_the_same_body_on_another_contract_or_component_then_checked_for_that_one():
    event = parse_event_cached("v2", "lifecycle-manager", GOOD)

    other = parse_event_cached("v2", "compass", GOOD)
    with pytest.raises(EventInvalid, match="owner is required in contract v1"):
        parse_event_cached("v1", "lifecycle-manager", GOOD)

    assert (event.component, other.component) == ("lifecycle-manager", "compass")


def test_given_more_distinct_bodies_than_kept_then_the_cache_stays_bounded():
    first = parse_event_cached("v2", "lifecycle-manager", GOOD)
    for number in range(PARSED_KEPT):
        parse_event_cached("v2", "lifecycle-manager", GOOD.replace(b'"default"', f'"n{number}"'.encode()))

    again = parse_event_cached("v2", "lifecycle-manager", GOOD)

    assert events._parsed.cache_info().currsize == PARSED_KEPT
    assert again == first and again is not first  # the oldest went out and was parsed anew


def test_given_a_body_over_the_cached_size_then_it_is_parsed_but_never_kept():
    padded = GOOD[:-1] + b', "padding": "' + b"x" * CACHED_BODY + b'"}'

    event = parse_event_cached("v2", "lifecycle-manager", padded)
    again = parse_event_cached("v2", "lifecycle-manager", padded)

    assert again == event and again is not event
    assert events._parsed.cache_info().currsize == 0
