"""Validating admission webhooks as the API server calls them: the AdmissionReview it sends (what
our runtime watcher reads of it, ``watchers.runtime.review``), for CREATE, UPDATE, DELETE, the
status subresource and dry runs; which requests a webhook gets (``objectSelector``, ``matchPolicy``);
what becomes of the write when the webhook denies it, is down or answers too late
(``failurePolicy``); and the product's own rendered webhook configuration, called for real.

Each case's webhook server is a TLS server in this process behind a Service of the case's
namespace (``Backend.webhook_server``); its configuration only selects that namespace, and it is
active once a canary request reached the server (a real API server loads configurations in the
background).
"""

from __future__ import annotations

import base64
import itertools
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.conf import settings

from tests.kube.contract.backends import Backend, wait_for
from tests.kube.contract.calls import MERGE, Client, path
from tests.kube.contract.resources import API_VERSION, GROUP, widget
from tests.kube.contract.webhook import WebhookServer
from watchers import rendering
from watchers.models import Watcher
from watchers.runtime.review import detect_change, parse_admission_review

SERVICE = "hook"
_canaries = itertools.count(1)


def webhook(
    name: str,
    namespace: str,
    *,
    rules: list[dict[str, Any]],
    path_: str,
    ca_pem: bytes,
    service: str = SERVICE,
    **fields: Any,
) -> dict[str, Any]:
    return {
        "name": f"{name}.{GROUP}",
        "admissionReviewVersions": ["v1"],
        "sideEffects": "None",
        "failurePolicy": "Fail",
        "timeoutSeconds": 5,
        "clientConfig": {
            "caBundle": base64.b64encode(ca_pem).decode(),
            "service": {"name": service, "namespace": namespace, "path": path_, "port": 443},
        },
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
        "rules": rules,
        **fields,
    }


def widget_rule(
    *operations: str, resources: tuple[str, ...] = ("widgets",), versions: tuple[str, ...] = ("v1",)
):
    return [
        {
            "apiGroups": [GROUP],
            "apiVersions": list(versions),
            "resources": list(resources),
            "operations": list(operations or ("CREATE", "UPDATE", "DELETE")),
            "scope": "Namespaced",
        }
    ]


@pytest.fixture
def client(backend, widgets_served) -> Client:
    return Client(backend.api)


@pytest.fixture
def server(backend: Backend, ca, ns) -> WebhookServer:
    return backend.webhook_server(ca=ca, service=SERVICE, namespace=ns)


@pytest.fixture
def configure(
    backend: Backend, client: Client, server: WebhookServer, ca, ns
) -> Iterator[Callable[..., None]]:
    """``configure(*webhooks)``: a ValidatingWebhookConfiguration with them, once it is in force."""
    name = f"contract-{ns}"
    where = path("admissionregistration.k8s.io/v1", "validatingwebhookconfigurations", None)

    def make(*webhooks: dict[str, Any]) -> None:
        token = f"{next(_canaries)}"
        canary = webhook(
            "canary",
            ns,
            rules=[
                {
                    "apiGroups": [""],
                    "apiVersions": ["v1"],
                    "resources": ["configmaps"],
                    "operations": ["CREATE"],
                }
            ],
            path_=f"/canary-{token}",
            ca_pem=ca.certificate_pem,
            objectSelector={"matchLabels": {"contract-canary": token}},
        )
        created = client.create(where, {"metadata": {"name": name}, "webhooks": [canary, *webhooks]})
        assert created.ok, created.message

        def arrived() -> bool:
            probe = {"metadata": {"generateName": "canary-", "labels": {"contract-canary": token}}}
            client.create(path("v1", "configmaps", ns), probe, dryRun="All")
            return bool(server.requests(f"/canary-{token}"))

        wait_for(arrived, what=f"webhook configuration {name} in force")

    yield make
    client.delete(f"{where}/{name}")


def test_create_update_and_delete_are_reviewed_with_what_the_runtime_watcher_reads(
    backend, client, server, configure, ca, ns
):
    configure(webhook("crud", ns, rules=widget_rule(), path_="/validate/crud", ca_pem=ca.certificate_pem))
    where = path(API_VERSION, "widgets", ns)

    created = client.create(where, widget("w", ns, spec={"a": 1})).body
    updated = client.merge(f"{where}/w", {"spec": {"a": 2}}, manager="editor").body
    client.merge(f"{where}/w", {"metadata": {"labels": {"only": "labels"}}})
    client.delete(f"{where}/w")

    # (a write tried again on a fresh copy is reviewed again: the last review of each is the one
    # of the object stored; see the product's webhook test below)
    reviews = _last_of_each_write(
        [r for r in server.reviews if r["path"] == "/validate/crud?timeout=5s"],
        key=lambda r: (r["request"]["operation"], detect_change(parse_admission_review(_raw(r))).outcome),
    )
    assert [r["request"]["operation"] for r in reviews] == ["CREATE", "UPDATE", "UPDATE", "DELETE"]
    create, update, _relabel, delete = (r["request"] for r in reviews)
    for review in reviews:
        assert (review["apiVersion"], review["kind"]) == ("admission.k8s.io/v1", "AdmissionReview")
        request = review["request"]
        assert request["uid"]
        assert (
            request["kind"] == request["requestKind"] == {"group": GROUP, "version": "v1", "kind": "Widget"}
        )
        assert (
            request["resource"]
            == request["requestResource"]
            == {
                "group": GROUP,
                "version": "v1",
                "resource": "widgets",
            }
        )
        assert (request["name"], request["namespace"]) == ("w", ns)
        assert "subResource" not in request
        assert request["dryRun"] is False
        assert request["userInfo"]["username"] == backend.username
        assert "system:authenticated" in request["userInfo"]["groups"]
    # CREATE: the object to be stored (its uid already given), no old object.
    assert create["object"]["metadata"]["uid"] == created["metadata"]["uid"]
    assert not create["object"]["metadata"].get("resourceVersion")
    assert create["oldObject"] is None
    assert create["options"] == {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"}
    # UPDATE: both versions; the old one is the stored one.
    assert (update["oldObject"]["spec"], update["object"]["spec"]) == ({"a": 1}, {"a": 2})
    assert update["oldObject"]["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    assert update["options"] == {
        "kind": "UpdateOptions",
        "apiVersion": "meta.k8s.io/v1",
        "fieldManager": "editor",
    }
    # DELETE: the stored object as oldObject, nothing new.
    assert delete["object"] is None
    assert delete["oldObject"]["metadata"]["resourceVersion"] != updated["metadata"]["resourceVersion"]
    assert delete["options"]["kind"] == "DeleteOptions"
    # Our runtime watcher reads each review as upstream's does: every change but the label edit is sent.
    decisions = [detect_change(parse_admission_review(_raw(r))) for r in reviews]
    assert [d.outcome for d in decisions] == ["create", "spec-changed", "no-change", "delete"]
    assert decisions[0].event.change.uid == created["metadata"]["uid"]
    assert decisions[1].event.change.old_resource_version == created["metadata"]["resourceVersion"]


def test_the_status_subresource_is_reviewed_as_such(client, server, configure, ca, ns):
    configure(
        webhook(
            "status",
            ns,
            rules=widget_rule("UPDATE", resources=("widgets/status",)),
            path_="/validate/status",
            ca_pem=ca.certificate_pem,
        )
    )
    where = path(API_VERSION, "widgets", ns, "w")
    client.create(path(API_VERSION, "widgets", ns), widget("w", ns, spec={"a": 1}))

    client.merge(where + "/status", {"status": {"state": "Ready"}})
    client.merge(where, {"spec": {"a": 2}})  # not the status: not this webhook's

    requests = server.requests("/validate/status")
    assert requests  # more than one when a try on the cached copy conflicted: each the same change
    for request in requests:
        assert (request["operation"], request["subResource"], request["requestSubResource"]) == (
            "UPDATE",
            "status",
            "status",
        )
        assert (request["oldObject"].get("status"), request["object"]["status"]) == (None, {"state": "Ready"})
    decision = detect_change(
        parse_admission_review(
            _raw({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})
        )
    )
    assert decision.outcome == "status-changed"


def test_a_dry_run_is_reviewed_as_one(client, server, configure, ca, ns):
    configure(
        webhook("plain", ns, rules=widget_rule("CREATE"), path_="/validate/plain", ca_pem=ca.certificate_pem),
        webhook(
            "dry",
            ns,
            rules=widget_rule("CREATE"),
            path_="/validate/dry",
            ca_pem=ca.certificate_pem,
            sideEffects="NoneOnDryRun",  # (what the product's webhooks declare)
        ),
    )
    where = path(API_VERSION, "widgets", ns)

    dry = client.create(where, widget("w", ns, spec={"a": 1}), dryRun="All")

    assert dry.status == 201
    assert client.get(f"{where}/w").status == 404
    for hook in ("/validate/plain", "/validate/dry"):
        (request,) = server.requests(hook)
        assert request["dryRun"] is True
        assert request["options"] == {
            "kind": "CreateOptions",
            "apiVersion": "meta.k8s.io/v1",
            "dryRun": ["All"],
        }


def test_a_webhook_with_side_effects_is_refused(client, ca, ns):
    hook = webhook(
        "effects", ns, rules=widget_rule(), path_="/x", ca_pem=ca.certificate_pem, sideEffects="Some"
    )
    where = path("admissionregistration.k8s.io/v1", "validatingwebhookconfigurations", None)

    answer = client.create(where, {"metadata": {"name": f"effects-{ns}"}, "webhooks": [hook]})

    assert answer.status == 422
    assert answer.causes == {("webhooks[0].sideEffects", "FieldValueNotSupported")}
    assert answer.message == (
        f'ValidatingWebhookConfiguration.admissionregistration.k8s.io "effects-{ns}" is invalid: '
        'webhooks[0].sideEffects: Unsupported value: "Some": supported values: "None", "NoneOnDryRun"'
    )


def test_an_object_selector_limits_what_is_reviewed(client, server, configure, ca, ns):
    configure(
        webhook(
            "selected",
            ns,
            rules=widget_rule(),
            path_="/validate/selected",
            ca_pem=ca.certificate_pem,
            objectSelector={"matchLabels": {"watched": "yes"}},
        )
    )
    where = path(API_VERSION, "widgets", ns)
    labelled = widget("in", ns, spec={"a": 1})
    labelled["metadata"]["labels"] = {"watched": "yes"}

    client.create(where, labelled)
    client.create(where, widget("out", ns, spec={"a": 1}))
    client.merge(f"{where}/out", {"spec": {"a": 2}})
    client.merge(f"{where}/in", {"metadata": {"labels": {"watched": None}}})  # the old one matched
    client.merge(f"{where}/in", {"spec": {"a": 3}})  # neither does now

    reviews = server.requests("/validate/selected")
    seen = [(r["operation"], r["name"]) for r in reviews]
    # The API server may review one write more than once: a patch tried on its cached copy that
    # conflicts in etcd is tried again, admission included (seen under load). So: "out" never, the
    # label's removal (the old object matched) once at least, and no update where neither matched.
    assert seen[0] == ("CREATE", "in")
    assert set(seen[1:]) == {("UPDATE", "in")}

    def labelled_(obj: dict[str, Any] | None) -> bool:
        return ((obj or {}).get("metadata", {}).get("labels") or {}).get("watched") == "yes"

    updates = reviews[1:]
    assert all(labelled_(r["oldObject"]) or labelled_(r["object"]) for r in updates)
    assert any(labelled_(r["oldObject"]) and not labelled_(r["object"]) for r in updates)


def test_a_denial_is_the_writes_answer(client, server, configure, ca, ns):
    configure(
        webhook("deny", ns, rules=widget_rule("CREATE"), path_="/validate/deny", ca_pem=ca.certificate_pem)
    )
    server.decide = lambda request: {
        "allowed": False,
        "status": {"code": 403, "reason": "Forbidden", "message": "widgets are not welcome"},
    }

    answer = client.create(path(API_VERSION, "widgets", ns), widget("w", ns, spec={"a": 1}))

    assert answer.status == 403
    assert answer.reason == "Forbidden"
    assert answer.message == f'admission webhook "deny.{GROUP}" denied the request: widgets are not welcome'


def test_a_webhook_that_is_down_fails_the_write_only_with_failure_policy_fail(
    backend, client, configure, ca, ns
):
    backend.dead_service(service="down", namespace=ns)
    configure(
        *(
            webhook(
                policy.lower(),
                ns,
                rules=widget_rule("CREATE"),
                path_="/validate/down",
                ca_pem=ca.certificate_pem,
                service="down",
                failurePolicy=policy,
                objectSelector={"matchLabels": {"policy": policy}},
            )
            for policy in ("Fail", "Ignore")
        )
    )
    where = path(API_VERSION, "widgets", ns)

    def labelled(name: str, policy: str) -> dict[str, Any]:
        doc = widget(name, ns, spec={"a": 1})
        doc["metadata"]["labels"] = {"policy": policy}
        return doc

    failed = client.create(where, labelled("f", "Fail"))
    ignored = client.create(where, labelled("i", "Ignore"))

    assert failed.status == 500
    assert failed.reason == "InternalError"
    assert failed.message.startswith(
        f'Internal error occurred: failed calling webhook "fail.{GROUP}": failed to call webhook: '
        f'Post "https://down.{ns}.svc:443/validate/down?timeout=5s": '
    )
    assert "connection refused" in failed.message
    assert ignored.status == 201


def test_a_webhook_that_answers_too_late_fails_the_write_only_with_failure_policy_fail(
    client, server, configure, ca, ns
):
    configure(
        *(
            webhook(
                policy.lower(),
                ns,
                rules=widget_rule("CREATE"),
                path_="/validate/slow",
                ca_pem=ca.certificate_pem,
                failurePolicy=policy,
                timeoutSeconds=1,
                objectSelector={"matchLabels": {"policy": policy}},
            )
            for policy in ("Fail", "Ignore")
        )
    )
    server.delay = 2.0
    where = path(API_VERSION, "widgets", ns)

    def labelled(name: str, policy: str) -> dict[str, Any]:
        doc = widget(name, ns, spec={"a": 1})
        doc["metadata"]["labels"] = {"policy": policy}
        return doc

    failed = client.create(where, labelled("f", "Fail"))
    ignored = client.create(where, labelled("i", "Ignore"))

    assert failed.status == 500
    assert failed.message == (
        f'Internal error occurred: failed calling webhook "fail.{GROUP}": failed to call webhook: '
        f'Post "https://{SERVICE}.{ns}.svc:443/validate/slow?timeout=1s": context deadline exceeded'
    )
    assert ignored.status == 201


def test_match_policy_equivalent_reviews_a_request_to_another_version_as_the_rules_version(
    client, server, configure, ca, ns
):
    configure(
        *(
            webhook(
                policy.lower(),
                ns,
                rules=widget_rule("CREATE"),
                path_=f"/validate/{policy.lower()}",
                ca_pem=ca.certificate_pem,
                matchPolicy=policy,
            )
            for policy in ("Exact", "Equivalent")
        )
    )

    client.create(
        path(f"{GROUP}/v1beta1", "widgets", ns),
        widget("w", ns, api_version=f"{GROUP}/v1beta1", spec={"a": 1}),
    )

    assert server.requests("/validate/exact") == []
    (request,) = server.requests("/validate/equivalent")
    assert request["kind"] == {"group": GROUP, "version": "v1", "kind": "Widget"}
    assert request["requestKind"] == {"group": GROUP, "version": "v1beta1", "kind": "Widget"}
    assert request["resource"]["version"] == "v1"
    assert request["requestResource"]["version"] == "v1beta1"
    assert request["object"]["apiVersion"] == API_VERSION


@pytest.fixture(scope="session")
def skr_webhook(backend: Backend, ca) -> WebhookServer:
    """Our runtime watcher's Service as the product renders it: ``kyma-system/skr-webhook``."""
    return backend.webhook_server(
        ca=ca, service=rendering.NAME, namespace=backend.ensure_namespace(rendering.NAMESPACE)
    )


def test_the_products_webhook_configuration_is_called_as_the_runtime_watcher_expects(
    backend, client, skr_webhook, ca, ns
):
    """``watchers.rendering``'s configuration for a spec and a status Watcher of widgets, in force
    on the API server: what it sends our runtime watcher, and what the watcher makes of it."""
    labels = {"contract-watched": ns}
    watched = {"group": GROUP, "version": "*", "resource": "widgets"}
    spec_watcher, status_watcher = (
        Watcher(
            namespace="kcp-system",
            name=f"contract-{field}",
            manager=f"contract-{field}",
            component=f"contract-{field}",
            labels_to_watch=labels,
            resource_to_watch=watched,
            field=field,
        )
        for field in ("spec", "status")
    )
    config = rendering.webhook_configuration(
        [spec_watcher, status_watcher], ca.certificate_pem, module_kinds=[]
    )
    configurations = path("admissionregistration.k8s.io/v1", "validatingwebhookconfigurations", None)
    assert client.create(configurations, config).ok
    where = path(API_VERSION, "widgets", ns)
    doc = widget("w", ns, spec={"a": 1})
    doc["metadata"]["labels"] = labels
    try:

        def in_force() -> bool:
            client.create(where, doc, dryRun="All")  # (NoneOnDryRun: called for dry runs too)
            return bool(skr_webhook.requests("/validate/contract-spec"))

        wait_for(in_force, what="the product's webhook configuration in force")
        skr_webhook.reviews.clear()
        client.create(where, doc)
        client.merge(f"{where}/w", {"spec": {"a": 2}})
        client.merge(f"{where}/w", {"metadata": {"annotations": {"only": "metadata"}}})
        client.merge(f"{where}/w/status", {"status": {"state": "Ready"}})
        client.delete(f"{where}/w")
    finally:
        client.delete(f"{configurations}/{rendering.NAME}")

    reviews = [r for r in skr_webhook.reviews if r["request"].get("namespace") == ns]
    assert {r["path"] for r in reviews} == {
        "/validate/contract-spec?timeout=15s",
        "/validate/contract-status?timeout=15s",
    }
    decisions = [
        (r["path"].split("?")[0], detect_change(parse_admission_review(_raw(r))).outcome) for r in reviews
    ]
    # What the API server guarantees: every write is reviewed before it is stored, in the order of
    # the writes; not that it is reviewed once. An update or a delete is tried first on the watch
    # cache's copy of the object (k8s.io/apiserver, storage/cacher's CacheDelegator passes it to
    # etcd3's GuaranteedUpdate and conditionalDelete); when that copy was stale (the cache had not
    # yet seen the write before, as under load) the etcd transaction fails and the write is tried
    # again on the current object, validating admission included: one review more, of the same
    # change, with the same decision (seen as six instead of five). So: repeats of one review in a
    # row count once, and each write was reviewed at least once.
    assert _once(decisions) == [
        ("/validate/contract-spec", "create"),
        ("/validate/contract-spec", "spec-changed"),
        ("/validate/contract-spec", "no-change"),
        ("/validate/contract-status", "status-changed"),
        ("/validate/contract-spec", "delete"),
    ]
    assert [r["request"]["operation"] for r in reviews].count("CREATE") == 1  # a create is never retried


def _last_of_each_write(reviews: list[dict[str, Any]], *, key: Callable[[dict[str, Any]], Any]) -> list:
    """The last review of each run of reviews with the same ``key`` (one write, tried again)."""
    return [
        r for index, r in enumerate(reviews) if index + 1 == len(reviews) or key(reviews[index + 1]) != key(r)
    ]


def _once(items: list) -> list:
    """``items`` with each run of equal neighbours as one."""
    return [item for index, item in enumerate(items) if index == 0 or items[index - 1] != item]


def _raw(review: dict[str, Any]) -> bytes:
    """A review as our runtime watcher receives it (without the test server's note of the path)."""
    return json.dumps({k: v for k, v in review.items() if k != "path"}).encode()


def test_the_products_webhook_for_owned_objects_reports_updates_and_deletions_of_labelled_ones(
    client, skr_webhook, ca, ns
):
    """``watchers.rendering.owned_objects_webhook`` in force on the API server, for a cluster-scoped
    kind (the PriorityClass) and a namespaced one: an update or deletion of an object labelled as
    the control plane's is reviewed (the deletion with the object as it was), a creation or an
    unlabelled object is not, and our runtime watcher sends an event for each reviewed change."""
    hook = rendering.owned_objects_webhook(
        [("scheduling.k8s.io", "v1", "priorityclasses", False), ("", "v1", "configmaps", True)],
        ca.certificate_pem,
    )
    hook["objectSelector"]["matchLabels"]["contract-owned"] = ns  # this case's objects only
    configurations = path("admissionregistration.k8s.io/v1", "validatingwebhookconfigurations", None)
    labels = {**hook["objectSelector"]["matchLabels"]}
    classes = path("scheduling.k8s.io/v1", "priorityclasses", None)
    ours, theirs = f"owned-{ns}", f"theirs-{ns}"
    assert client.create(classes, {"metadata": {"name": ours, "labels": labels}, "value": 1000}).ok
    assert client.create(classes, {"metadata": {"name": theirs}, "value": 1000}).ok
    assert client.create(configurations, {"metadata": {"name": f"owned-{ns}"}, "webhooks": [hook]}).ok
    reviewed = f"/validate/{settings.LISTENER_RECONCILE_COMPONENT}"
    try:
        probes = itertools.count()

        def in_force() -> bool:
            probe = {"description": f"probe {next(probes)}"}
            client.call("PATCH", f"{classes}/{ours}", probe, query=[("dryRun", "All")], content_type=MERGE)
            return bool(skr_webhook.requests(reviewed))

        wait_for(in_force, what="the owned-objects webhook in force")
        skr_webhook.reviews.clear()
        config_map = {"metadata": {"name": "owned", "labels": labels}, "data": {"a": "1"}}
        client.create(path("v1", "configmaps", ns), config_map)  # a creation: not reviewed
        client.merge(path("v1", "configmaps", ns, "owned"), {"data": {"a": "2"}})
        client.merge(f"{classes}/{ours}", {"description": "edited"})
        client.delete(f"{classes}/{theirs}")  # not labelled: not reviewed
        client.delete(f"{classes}/{ours}")
    finally:
        client.delete(f"{configurations}/owned-{ns}")
        client.delete(f"{classes}/{ours}")

    reviews = [r for r in skr_webhook.reviews if r["path"].split("?")[0] == reviewed]
    seen = _once(
        [
            (
                r["request"]["operation"],
                r["request"]["resource"]["resource"],
                r["request"].get("namespace", ""),
                r["request"]["name"],
                detect_change(parse_admission_review(_raw(r))).outcome,
            )
            for r in reviews
        ]
    )
    assert seen == [
        ("UPDATE", "configmaps", ns, "owned", "spec-changed"),  # (no spec: every update counts)
        ("UPDATE", "priorityclasses", "", ours, "spec-changed"),
        ("DELETE", "priorityclasses", "", ours, "delete"),
    ]
    deletion = reviews[-1]["request"]
    assert deletion["object"] is None and deletion["oldObject"]["metadata"]["labels"] == labels
