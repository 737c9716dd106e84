"""Pure logic: review parsing, upstream's change-detection rules, the WatchEvent wire format."""

from __future__ import annotations

import dataclasses
import json

import pytest

from tests.watchers.runtime.support import kyma, review
from watchers.runtime import (
    KCP_SUCCEEDED,
    GroupVersionKind,
    ReviewError,
    WatchEvent,
    admission_response,
    backoff_delay,
    detect_change,
    parse_admission_review,
)
from watchers.runtime.kcpclient import retry_after_seconds
from watchers.runtime.review import Change, deep_equal
from watchers.runtime.sender import asked_delay


def decide(body: bytes):
    return detect_change(parse_admission_review(body))


@pytest.mark.parametrize(
    ("api_version", "kind", "expected"),
    [
        ("v1", "Pod", GroupVersionKind("", "v1", "Pod")),
        ("apps/v1", "Deployment", GroupVersionKind("apps", "v1", "Deployment")),
        (
            "operator.kyma-project.io/v1beta2",
            "Kyma",
            GroupVersionKind("operator.kyma-project.io", "v1beta2", "Kyma"),
        ),
        ("", "Thing", GroupVersionKind("", "", "Thing")),
        ("a/b/c", "Thing", GroupVersionKind("", "", "Thing")),
    ],
)
def test_gvk_from_api_version_like_apimachinery(api_version, kind, expected):
    assert GroupVersionKind.from_api_version(api_version, kind) == expected


def test_gvk_string_is_go_format():
    assert str(GroupVersionKind("", "v1", "Pod")) == "/v1, Kind=Pod"
    assert str(GroupVersionKind("apps", "v1", "Deployment")) == "apps/v1, Kind=Deployment"


def test_watch_event_json_is_byte_identical_to_upstream():
    event = WatchEvent.for_object(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "n"}}
    )
    assert event.to_json() == (
        b'{"watched":{"Namespace":"n","Name":"c"},"watchedGvk":{"group":"","version":"v1","kind":"ConfigMap"}}'
    )


def test_the_change_comes_after_upstreams_bytes_which_stay_identical():
    body = review(
        "UPDATE",
        {
            **kyma("k", spec=SPEC2),
            "metadata": {"name": "k", "namespace": "n", "uid": "u-1", "resourceVersion": "8"},
        },
        {
            **kyma("k", spec=SPEC),
            "metadata": {"name": "k", "namespace": "n", "uid": "u-1", "resourceVersion": "7"},
        },
    )
    event = decide(body).event
    assert event.change == Change("UPDATE", "u-1", "7")  # the stored version the change starts from
    assert event.to_json() == (
        b'{"watched":{"Namespace":"n","Name":"k"},'
        b'"watchedGvk":{"group":"operator.kyma-project.io","version":"v1beta2","kind":"Kyma"},'
        b'"change":{"operation":"UPDATE","uid":"u-1","oldResourceVersion":"7"}}'
    )


def test_a_created_object_has_no_old_version_and_a_deleted_one_names_its_last():
    created = {**kyma("k"), "metadata": {"name": "k", "namespace": "n", "uid": "u-2", "resourceVersion": ""}}
    assert decide(review("CREATE", created)).event.change == Change("CREATE", "u-2", "")
    gone = {**kyma("k"), "metadata": {"name": "k", "namespace": "n", "uid": "u-2", "resourceVersion": "9"}}
    assert decide(review("DELETE", None, gone)).event.change == Change("DELETE", "u-2", "9")


def test_cluster_scoped_object_has_empty_namespace():
    event = WatchEvent.for_object(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kyma-system"}}
    )
    assert json.loads(event.to_json())["watched"] == {"Namespace": "", "Name": "kyma-system"}


SPEC, SPEC2 = (
    {"channel": "regular", "modules": [{"name": "btp"}]},
    {"channel": "fast", "modules": [{"name": "btp"}]},
)
READY, WARNING = {"state": "Ready"}, {"state": "Warning"}

# scenario -> (old object, new object, subResource); every object is "kyma-system/k"
SCENARIOS = {
    "no-change": (kyma("k", spec=SPEC, status=READY), kyma("k", spec=SPEC, status=READY), ""),
    "spec-change": (kyma("k", spec=SPEC, status=READY), kyma("k", spec=SPEC2, status=READY), ""),
    "status-subresource-change": (
        kyma("k", spec=SPEC, status=READY),
        kyma("k", spec=SPEC, status=WARNING),
        "status",
    ),
    "without-spec": (kyma("k", status=READY), kyma("k", status=READY), ""),
}
# (operation, scenario) -> expected message (None: the event is sent and the message is "succeeded")
NOT_SENT = {
    ("UPDATE", "no-change"): "no change detected on watched resource kyma-system/k",
    **{
        ("CONNECT", s): "operation CONNECT not supported for operator.kyma-project.io/v1beta2, Kind=Kyma"
        for s in SCENARIOS
    },
}


def matrix_review(operation: str, scenario: str) -> bytes:
    old, new, sub_resource = SCENARIOS[scenario]
    if operation == "CREATE":
        return review("CREATE", new, None, sub_resource=sub_resource)
    if operation == "DELETE":
        return review("DELETE", None, old, sub_resource=sub_resource)
    if operation == "CONNECT":
        return review(
            "CONNECT", {"kind": "PodExecOptions", "apiVersion": "v1"}, None, sub_resource=sub_resource
        )
    return review("UPDATE", new, old, sub_resource=sub_resource)


@pytest.mark.parametrize("scenario", list(SCENARIOS))
@pytest.mark.parametrize("operation", ["CREATE", "UPDATE", "DELETE", "CONNECT"])
def test_upstream_scenario_matrix(operation, scenario):
    decision = decide(matrix_review(operation, scenario))
    expected = NOT_SENT.get((operation, scenario))
    if expected is None:
        assert decision.send
        assert decision.message == KCP_SUCCEEDED
        assert dataclasses.replace(decision.event, change=None) == WatchEvent(
            "kyma-system",
            "k",
            GroupVersionKind(group="operator.kyma-project.io", version="v1beta2", kind="Kyma"),
        )
        assert decision.event.change.operation == operation
    else:
        assert not decision.send
        assert decision.message == expected


@pytest.mark.parametrize(
    ("old", "new", "sub_resource", "sent"),
    [
        # status changed but watched on spec, spec identical -> nothing
        (kyma("k", spec=SPEC, status=READY), kyma("k", spec=SPEC, status=WARNING), "", False),
        # spec changed but the status sub-resource is watched, status identical -> nothing
        (kyma("k", spec=SPEC, status=READY), kyma("k", spec=SPEC2, status=READY), "status", False),
        # only the old object lacks a spec -> counts as a change
        (kyma("k"), kyma("k", spec=SPEC), "", True),
        # status sub-resource: status appearing (nil -> {}) is a change, as in Go's DeepEqual
        (kyma("k", spec=SPEC), kyma("k", spec=SPEC, status={}), "status", True),
        # status sub-resource on objects without status on both sides -> no change
        (kyma("k", spec=SPEC), kyma("k", spec=SPEC2), "status", False),
        # sub-resource names are compared case-insensitively
        (kyma("k", status=READY), kyma("k", status=WARNING), "Status", True),
        # metadata-only change with identical spec -> nothing
        (
            kyma("k", spec=SPEC),
            {
                **kyma("k", spec=SPEC),
                "metadata": {"name": "k", "namespace": "kyma-system", "labels": {"a": "b"}},
            },
            "",
            False,
        ),
    ],
)
def test_update_edge_cases(old, new, sub_resource, sent):
    assert decide(review("UPDATE", new, old, sub_resource=sub_resource)).send is sent


def test_other_subresources_are_not_watched():
    decision = decide(review("UPDATE", kyma("k", spec=SPEC2), kyma("k", spec=SPEC), sub_resource="scale"))
    assert not decision.send
    assert decision.message == "invalid subresource: watched resource kyma-system/k"


def test_delete_sends_old_object_and_create_sends_new_object():
    old, new = kyma("old-name", spec=SPEC), kyma("new-name", spec=SPEC)
    assert decide(review("DELETE", new, old)).event.name == "old-name"
    assert decide(review("CREATE", new, old)).event.name == "new-name"


def test_connect_message_for_core_group():
    body = review(
        "CONNECT", {"kind": "PodExecOptions"}, None, kind={"group": "", "version": "v1", "kind": "Pod"}
    )
    assert decide(body).message == "operation CONNECT not supported for /v1, Kind=Pod"


def test_deep_equal_follows_go_json_semantics():
    assert deep_equal({"n": 1}, {"n": 1.0})  # both float64 in Go
    assert not deep_equal({"b": True}, {"b": 1})  # bool never equals a number
    assert not deep_equal({"a": None}, {})  # key present with null vs absent
    assert not deep_equal({"a": None}, {"a": {}})  # nil vs empty map
    assert deep_equal({"l": [1, {"x": "y"}]}, {"l": [1.0, {"x": "y"}]})
    assert not deep_equal({"l": [1, 2]}, {"l": [2, 1]})


def test_non_object_spec_counts_as_absent_like_go():
    # Go cannot decode a list into map[string]any, leaves spec nil and so reports a change
    assert decide(review("UPDATE", {**kyma("k"), "spec": [1]}, {**kyma("k"), "spec": [1]})).send


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"not json", "not valid JSON"),
        (b"\xff\xfe", "not valid JSON"),
        (b"[]", "must be a JSON object"),
        (b'{"kind":"Pod","apiVersion":"v1"}', "kind must be 'AdmissionReview'"),
        (b'{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v2","request":{}}', "apiVersion must be"),
        (b'{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1"}', "has no request"),
        (b'{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":null}', "has no request"),
        (
            b'{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{"operation":"CREATE"}}',
            "uid",
        ),
        (review("PATCH", kyma("k")), "request.operation must be one of"),
        (review("CREATE", None, None), "request.object is required for CREATE"),
        (review("UPDATE", kyma("k"), None), "request.oldObject is required for UPDATE"),
        (review("DELETE", None, None), "request.oldObject is required for DELETE"),
        (review("CREATE", None, None).replace(b'"object": null', b'"object": "x"'), "request.object must be"),
    ],
)
def test_malformed_reviews_are_rejected_with_reason(body, reason):
    with pytest.raises(ReviewError, match=reason.replace("(", r"\(").replace(")", r"\)")):
        parse_admission_review(body)


def test_response_mirrors_request_and_always_allows():
    request = parse_admission_review(
        review("CREATE", kyma("k"), uid="abc-123", api_version="admission.k8s.io/v1")
    )
    assert json.loads(admission_response(request, "hello")) == {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {
            "uid": "abc-123",
            "allowed": True,
            "status": {"metadata": {}, "status": "Success", "message": "hello"},
        },
    }


def test_a_retry_after_is_waited_at_least_spread_up_to_half_again_and_capped():
    assert asked_delay(2.0, 30, rand=lambda: 0.0) == 2.0
    assert asked_delay(2.0, 30, rand=lambda: 1.0) == 3.0
    assert asked_delay(60.0, 30, rand=lambda: 0.5) == 30
    assert retry_after_seconds("2") == 2.0
    assert retry_after_seconds("0.5") == 0.5
    assert retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT") is None
    assert retry_after_seconds("-1") is None
    assert retry_after_seconds(None) is None


def test_backoff_doubles_with_jitter_and_caps():
    assert backoff_delay(0, 0.1, 30) == 0
    low = [backoff_delay(n, 0.1, 30, rand=lambda: 0.0) for n in range(1, 12)]
    high = [backoff_delay(n, 0.1, 30, rand=lambda: 1.0) for n in range(1, 12)]
    assert low[:4] == pytest.approx([0.05, 0.1, 0.2, 0.4])
    assert high[:4] == pytest.approx([0.1, 0.2, 0.4, 0.8])
    assert high[-1] == 30
    assert low[-1] == 15
    assert backoff_delay(10_000, 0.1, 30, rand=lambda: 1.0) == 30  # no overflow
