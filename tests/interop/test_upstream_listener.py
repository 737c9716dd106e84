"""Our runtime watcher sending to upstream's listener (the real Go package, pinned, built from source).

Given upstream's AdmissionReview fixtures going into our watcher process, upstream's listener must
receive and decode each WatchEvent exactly as upstream's own watcher would have sent it, and answer
200, which our watcher counts as delivered. Where upstream's listener is down or answers otherwise,
our watcher must retry what can succeed later and drop only what never can.

What upstream's watcher sends for a review (kyma-project/runtime-watcher,
``runtime-watcher/pkg/admissionreview/handler.go``, ``validateResources`` and ``sendRequestToKcp``):
CREATE the object, DELETE the old object, UPDATE the object when ``spec`` changed (``status`` for
the status subresource); the event holds the object's namespace and name and the GVK parsed from its
``apiVersion`` and ``kind``, marshalled from the listener package's ``WatchEvent`` type, the same
type the listener decodes into (``watcherBody`` in the record).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.processes import free_port
from tests.watchers.runtime.support import metric, scrape_when, settled, upstream_part

FIXTURES = Path("/work/shared/upstream/fixtures/runtime-watcher")
EVENT_PATH = "/v2/lifecycle-manager/event"
SUCCEEDED = "kcp request succeeded"
RUNTIME_ID = "runtime-1"  # the CN of the runtime certificate make_pki issues


def fixture(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / name).read_text())


def create_review() -> dict[str, Any]:
    """A real API server's CREATE of a Kyma (upstream's mock-request-reference.json, unchanged)."""
    return fixture("mock-request-reference.json")


def status_update_review() -> dict[str, Any]:
    """A real API server's UPDATE of a status subresource, state Ready -> Deleting (unchanged)."""
    return fixture("mock-request-reference-status.json")


def spec_update_review() -> dict[str, Any]:
    """The CREATE fixture's Kyma updated: the stored object had the regular channel."""
    review = create_review()
    request = review["request"]
    request["oldObject"] = copy.deepcopy(request["object"])
    request["oldObject"]["spec"]["channel"] = "regular"
    request["operation"] = "UPDATE"
    request["options"] = {"kind": "UpdateOptions", "apiVersion": "meta.k8s.io/v1"}
    return review


def delete_review() -> dict[str, Any]:
    """The CREATE fixture's Kyma deleted: the API server sends it as oldObject, object null."""
    review = create_review()
    request = review["request"]
    request["oldObject"], request["object"] = request["object"], None
    request["operation"] = "DELETE"
    request["options"] = {"kind": "DeleteOptions", "apiVersion": "meta.k8s.io/v1"}
    return review


def encode(review: dict[str, Any]) -> bytes:
    return json.dumps(review).encode()


def watched_by_upstream(review: dict[str, Any]) -> dict[str, Any]:
    """The event upstream's watcher sends for ``review``, in upstream's decoded shape: the object
    (the old one on DELETE), its namespace and name, the GVK parsed from apiVersion and kind."""
    request = review["request"]
    obj = request["oldObject"] if request["operation"] == "DELETE" else request["object"]
    group, _, version = obj["apiVersion"].rpartition("/")
    return {
        "watched": {"Namespace": obj["metadata"]["namespace"], "Name": obj["metadata"]["name"]},
        "watchedGvk": {"group": group, "version": version, "kind": obj["kind"]},
    }


def failures(samples: dict, reason: str) -> float:
    return metric(samples, "watcher_events_failed_total", reason=reason)


REVIEWS = {
    "create": create_review,
    "update-spec": spec_update_review,
    "update-status": status_update_review,
    "delete": delete_review,
}


@pytest.mark.parametrize("case", list(REVIEWS))
def test_upstream_listener_decodes_our_event_as_upstream_watcher_sends_it(
    case, start_upstream, start_watcher
):
    upstream = start_upstream()
    watcher = start_watcher(upstream.addr)
    review = REVIEWS[case]()

    answer = watcher.review(encode(review))

    assert (answer["uid"], answer["allowed"], answer["status"]["message"]) == (
        review["request"]["uid"],
        True,
        SUCCEEDED,
    )
    [event] = upstream.wait_for_events(1)
    assert "problem" not in event, event["problem"]  # upstream's listener put in the types it declares
    assert {key: event[key] for key in ("watched", "watchedGvk")} == watched_by_upstream(review)
    assert event["runtimeId"] == RUNTIME_ID  # from the certificate our watcher presented
    samples = settled(watcher.metrics_port)
    assert metric(samples, "watcher_events_sent_total") == 1
    assert sum(v for (name, _), v in samples.items() if name == "watcher_events_failed_total") == 0
    [request] = upstream.wait_for_requests(1)
    assert (request["method"], request["path"], request["status"]) == ("POST", EVENT_PATH, 200)
    assert request["clientCN"] == RUNTIME_ID
    # our body is upstream's watcher's bytes plus our optional field, which upstream's decoder skips
    assert upstream_part(request["body"].encode()) == event["watcherBody"].encode()


def test_changes_upstream_watcher_ignores_never_reach_upstream_listener(start_upstream, start_watcher):
    upstream = start_upstream()
    watcher = start_watcher(upstream.addr)
    same_spec = create_review()
    same_spec["request"].update(operation="UPDATE", oldObject=copy.deepcopy(same_spec["request"]["object"]))
    same_spec["request"]["object"]["metadata"]["generation"] = 2  # metadata changed, spec did not
    same_status = status_update_review()
    same_status["request"]["object"]["status"] = copy.deepcopy(same_status["request"]["oldObject"]["status"])

    for review in (same_spec, same_status):
        name = review["request"]["object"]["metadata"]["name"]
        message = watcher.review(encode(review))["status"]["message"]
        assert message == f"no change detected on watched resource default/{name}"
    watcher.review(encode(delete_review()))  # sent after them: once it is in, they would be too

    [event] = upstream.wait_for_events(1)
    assert event["watched"] == {"Namespace": "default", "Name": "kyma-sample"}
    assert metric(settled(watcher.metrics_port), "watcher_events_sent_total") == 1
    assert [r["status"] for r in upstream.wait_for_requests(1)] == [200]


def test_heartbeats_get_upstream_listener_404_and_events_still_flow(start_upstream, start_watcher):
    upstream = start_upstream()
    watcher = start_watcher(upstream.addr, HEARTBEAT_INTERVAL="0.2")

    samples = scrape_when(
        watcher.metrics_port, lambda s: metric(s, "watcher_heartbeats_total", result="unsupported") >= 2
    )
    assert metric(samples, "watcher_heartbeats_total", result="failed") == 0
    heartbeats = upstream.wait_for_requests(2, "/watcher/heartbeat")
    assert {r["status"] for r in heartbeats} == {404}  # upstream's mux: no such route
    assert watcher.review(encode(create_review()))["status"]["message"] == SUCCEEDED
    [event] = upstream.wait_for_events(1)
    assert event["watched"]["Name"] == "kyma-sample"
    samples = settled(watcher.metrics_port)
    assert metric(samples, "watcher_events_sent_total") == 1
    assert "kcp listener has no heartbeat endpoint (404)" in watcher.output()


def test_event_waits_in_our_watcher_until_upstream_listener_is_up(start_upstream, start_watcher):
    port = free_port()
    watcher = start_watcher(f"localhost:{port}")  # nothing listens there yet

    # the admission answer does not wait for the control plane
    assert watcher.review(encode(create_review()))["status"]["message"] == SUCCEEDED
    scrape_when(watcher.metrics_port, lambda s: failures(s, "connect") >= 2)
    upstream = start_upstream(port)

    [event] = upstream.wait_for_events(1)
    assert event["watched"] == {"Namespace": "default", "Name": "kyma-sample"}
    samples = settled(watcher.metrics_port)
    assert metric(samples, "watcher_events_sent_total") == 1
    assert [r["status"] for r in upstream.wait_for_requests(1)] == [200]  # delivered once, no duplicate


def test_upstream_listener_401_is_retried_until_it_accepts(start_upstream, start_watcher):
    upstream = start_upstream()
    upstream.forward_client_certificate(False)  # a gateway that does not pass the certificate on
    watcher = start_watcher(upstream.addr)

    assert watcher.review(encode(create_review()))["status"]["message"] == SUCCEEDED
    refused = upstream.wait_for_requests(2, EVENT_PATH)
    assert {r["status"] for r in refused} == {401}
    assert "could not get client certificate from request" in refused[0]["answer"]
    assert upstream.events() == []
    upstream.forward_client_certificate(True)

    [event] = upstream.wait_for_events(1)
    assert event["runtimeId"] == RUNTIME_ID
    samples = settled(watcher.metrics_port)
    assert metric(samples, "watcher_events_sent_total") == 1
    assert failures(samples, "http-401") >= 2
    refusals = int(failures(samples, "http-401"))  # each refusal one failed attempt, then one success
    assert [r["status"] for r in upstream.wait_for_requests(refusals + 1)] == [401] * refusals + [200]


def test_unknown_component_is_upstream_404_dropped_once_and_the_next_event_flows(
    start_upstream, start_watcher
):
    upstream = start_upstream()
    watcher = start_watcher(upstream.addr)

    assert (
        watcher.review(encode(create_review()), component="other-manager")["status"]["message"] == SUCCEEDED
    )
    assert watcher.review(encode(delete_review()))["status"]["message"] == SUCCEEDED

    [event] = upstream.wait_for_events(1)
    assert event["watched"]["Name"] == "kyma-sample"
    samples = settled(watcher.metrics_port)  # nothing left to retry
    assert metric(samples, "watcher_events_dropped_total", reason="rejected-404") == 1
    assert metric(samples, "watcher_events_sent_total") == 1
    statuses = [(r["path"], r["status"]) for r in upstream.wait_for_requests(2)]
    assert statuses == [("/v2/other-manager/event", 404), (EVENT_PATH, 200)]  # the 404 never retried
