"""Admission webhooks, called over verified HTTPS like a real API server calls them."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest
from kubernetes import client

from pki.crypto import KeyPair
from runtime_emulator import RuntimeEmulator
from tests.runtime_emulator.helpers import (
    WEBHOOK_HOST,
    WebhookServer,
    json_patch,
    kyma,
    kyma_rules,
    webhook_configuration,
)

KYMAS = ("operator.kyma-project.io", "v1beta2", "kyma-system", "kymas")


def _register(api: client.ApiClient, config: dict[str, Any]) -> None:
    admission = client.AdmissionregistrationV1Api(api)
    if config["kind"] == "MutatingWebhookConfiguration":
        admission.create_mutating_webhook_configuration(config)
    else:
        admission.create_validating_webhook_configuration(config)


def test_given_a_validating_webhook_when_a_kyma_is_created_then_the_review_is_a_real_admission_review(
    api: client.ApiClient,
    custom: client.CustomObjectsApi,
    webhook: WebhookServer,
    ca: KeyPair,
    kyma_runtime: RuntimeEmulator,
):
    seen_stored: list[object] = []

    def decide(request: dict[str, Any]) -> dict[str, Any]:
        seen_stored.append(kyma_runtime.get_object("kymas", "k", "kyma-system"))
        return {"allowed": True}

    webhook.decide = decide
    _register(api, webhook_configuration("validate", ca.certificate_pem, kyma_rules()))

    custom.create_namespaced_custom_object(*KYMAS, kyma("k"))

    (review,) = webhook.reviews
    request = review["request"]
    assert review["apiVersion"] == "admission.k8s.io/v1" and review["kind"] == "AdmissionReview"
    assert review["path"] == "/validate" and review["host"] == f"{WEBHOOK_HOST}:443"
    assert request["kind"] == {"group": "operator.kyma-project.io", "version": "v1beta2", "kind": "Kyma"}
    assert request["resource"] == {
        "group": "operator.kyma-project.io",
        "version": "v1beta2",
        "resource": "kymas",
    }
    assert request["requestKind"] == request["kind"] and "subResource" not in request
    assert (request["operation"], request["name"], request["namespace"]) == ("CREATE", "k", "kyma-system")
    assert request["userInfo"]["username"] == "kubernetes-admin"
    assert request["object"]["spec"] == {"channel": "regular"} and request["oldObject"] is None
    assert request["dryRun"] is False and request["options"]["kind"] == "CreateOptions"
    assert len(request["uid"]) == 36
    assert seen_stored == [None]  # called before the object was persisted


def test_given_a_webhook_when_updating_status_and_deleting_then_old_objects_and_subresources_are_sent(
    api: client.ApiClient, custom: client.CustomObjectsApi, webhook: WebhookServer, ca: KeyPair
):
    custom.create_namespaced_custom_object(*KYMAS, kyma("k"))
    _register(api, webhook_configuration("validate", ca.certificate_pem, kyma_rules()))

    custom.patch_namespaced_custom_object(*KYMAS, "k", {"spec": {"channel": "fast"}})
    custom.patch_namespaced_custom_object_status(*KYMAS, "k", {"status": {"state": "Ready"}})
    custom.delete_namespaced_custom_object(*KYMAS, "k")

    update, status, delete = (review["request"] for review in webhook.reviews)
    assert (
        update["operation"],
        update["oldObject"]["spec"]["channel"],
        update["object"]["spec"]["channel"],
    ) == (
        "UPDATE",
        "regular",
        "fast",
    )
    assert (status["operation"], status["subResource"], status["object"]["status"]) == (
        "UPDATE",
        "status",
        {"state": "Ready"},
    )
    assert status["options"]["kind"] == "UpdateOptions"  # (a patch is an update to webhooks)
    assert (delete["operation"], delete["object"], delete["oldObject"]["metadata"]["name"]) == (
        "DELETE",
        None,
        "k",
    )


def test_given_rules_without_the_status_subresource_then_status_writes_are_not_sent(
    api: client.ApiClient, custom: client.CustomObjectsApi, webhook: WebhookServer, ca: KeyPair
):
    _register(api, webhook_configuration("main-only", ca.certificate_pem, kyma_rules(resources=("kymas",))))

    custom.create_namespaced_custom_object(*KYMAS, kyma("k"))
    custom.patch_namespaced_custom_object_status(*KYMAS, "k", {"status": {"state": "Ready"}})

    assert [r["request"]["operation"] for r in webhook.reviews] == ["CREATE"]


def test_given_an_object_selector_then_only_matching_objects_are_sent(
    api: client.ApiClient, custom: client.CustomObjectsApi, webhook: WebhookServer, ca: KeyPair
):
    selector = {
        "matchLabels": {"watched": "true"},
        "matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["dev"]}],
    }
    _register(
        api,
        webhook_configuration(
            "selective", ca.certificate_pem, kyma_rules("CREATE"), object_selector=selector
        ),
    )

    for name, labels in [
        ("plain", {}),
        ("watched", {"watched": "true"}),
        ("dev", {"watched": "true", "tier": "dev"}),
    ]:
        body = kyma(name)
        body["metadata"]["labels"] = labels
        custom.create_namespaced_custom_object(*KYMAS, body)

    assert [r["request"]["name"] for r in webhook.reviews] == ["watched"]


def test_given_a_namespace_selector_then_only_objects_in_matching_namespaces_are_sent(
    api: client.ApiClient, core: client.CoreV1Api, webhook: WebhookServer, ca: KeyPair
):
    rules = [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"], "operations": ["*"]}]
    selector = {"matchLabels": {"kubernetes.io/metadata.name": "kyma-system"}}
    _register(
        api, webhook_configuration("by-namespace", ca.certificate_pem, rules, namespace_selector=selector)
    )

    core.create_namespaced_config_map("default", {"metadata": {"name": "skipped"}})
    core.create_namespaced_config_map("kyma-system", {"metadata": {"name": "sent"}})

    assert [r["request"]["name"] for r in webhook.reviews] == ["sent"]


def test_given_a_denying_webhook_then_the_write_is_rejected_with_its_message_and_nothing_is_stored(
    api: client.ApiClient,
    custom: client.CustomObjectsApi,
    webhook: WebhookServer,
    ca: KeyPair,
    kyma_runtime: RuntimeEmulator,
):
    webhook.decide = lambda request: {
        "allowed": False,
        "status": {"code": 403, "reason": "Forbidden", "message": "channel is locked"},
    }
    _register(api, webhook_configuration("deny", ca.certificate_pem, kyma_rules()))

    with pytest.raises(client.ApiException) as raised:
        custom.create_namespaced_custom_object(*KYMAS, kyma("k"))

    assert raised.value.status == 403
    assert json.loads(raised.value.body)["message"] == (
        'admission webhook "deny.kyma-project.io" denied the request: channel is locked'
    )
    assert kyma_runtime.get_object("kymas", "k", "kyma-system") is None
    (call,) = kyma_runtime.webhook_calls
    assert (call.allowed, call.message, call.request["operation"]) == (False, "channel is locked", "CREATE")


@pytest.mark.parametrize(("policy", "succeeds"), [("Ignore", True), ("Fail", False)])
def test_given_an_unreachable_webhook_then_the_failure_policy_decides(
    api: client.ApiClient,
    custom: client.CustomObjectsApi,
    ca: KeyPair,
    kyma_runtime: RuntimeEmulator,
    policy: str,
    succeeds: bool,
):
    kyma_runtime.service_endpoints["kyma-system", "skr-webhook"] = ("127.0.0.1", 9)  # nothing listens there
    _register(api, webhook_configuration("down", ca.certificate_pem, kyma_rules(), failure_policy=policy))

    if succeeds:
        custom.create_namespaced_custom_object(*KYMAS, kyma("k"))
    else:
        with pytest.raises(client.ApiException) as raised:
            custom.create_namespaced_custom_object(*KYMAS, kyma("k"))
        assert raised.value.status == 500
        assert 'failed calling webhook "down.kyma-project.io"' in json.loads(raised.value.body)["message"]

    (call,) = kyma_runtime.webhook_calls
    assert "Connect call failed" in call.error or "refused" in call.error
    assert (kyma_runtime.get_object("kymas", "k", "kyma-system") is not None) is succeeds


def test_given_a_service_without_endpoints_when_failing_closed_then_the_error_says_so(
    api: client.ApiClient, custom: client.CustomObjectsApi, ca: KeyPair, kyma_runtime: RuntimeEmulator
):
    _register(api, webhook_configuration("orphan", ca.certificate_pem, kyma_rules()))

    with pytest.raises(client.ApiException) as raised:
        custom.create_namespaced_custom_object(*KYMAS, kyma("k"))

    assert 'no endpoints available for service "skr-webhook"' in json.loads(raised.value.body)["message"]


def test_given_a_slow_webhook_then_timeout_seconds_is_honoured(
    api: client.ApiClient, custom: client.CustomObjectsApi, webhook: WebhookServer, ca: KeyPair
):
    webhook.delay = 3
    _register(api, webhook_configuration("slow", ca.certificate_pem, kyma_rules(), timeout=1))

    started = time.monotonic()
    with pytest.raises(client.ApiException) as raised:
        custom.create_namespaced_custom_object(*KYMAS, kyma("k"))

    assert 1 <= time.monotonic() - started < 2.5
    assert "context deadline exceeded" in json.loads(raised.value.body)["message"]


def test_given_a_ca_bundle_that_does_not_match_then_tls_verification_fails(
    api: client.ApiClient, custom: client.CustomObjectsApi, webhook: WebhookServer, webhook_cert: KeyPair
):
    # The server certificate itself is not a CA: the chain cannot be verified.
    _register(api, webhook_configuration("mistrust", webhook_cert.certificate_pem, kyma_rules()))

    with pytest.raises(client.ApiException) as raised:
        custom.create_namespaced_custom_object(*KYMAS, kyma("k"))

    assert "CERTIFICATE_VERIFY_FAILED" in json.loads(raised.value.body)["message"]
    assert webhook.reviews == []


def test_given_a_user_edit_then_the_webhook_sees_the_user_and_the_change(
    api: client.ApiClient,
    custom: client.CustomObjectsApi,
    webhook: WebhookServer,
    ca: KeyPair,
    kyma_runtime: RuntimeEmulator,
):
    custom.create_namespaced_custom_object(*KYMAS, kyma("k"))
    _register(api, webhook_configuration("audit", ca.certificate_pem, kyma_rules("UPDATE")))

    kyma_runtime.edit_as_user(
        "kymas", "k", lambda obj: obj["spec"].update(channel="fast"), "kyma-system", user="jane"
    )

    (review,) = webhook.reviews
    assert review["request"]["userInfo"]["username"] == "jane"
    assert review["request"]["object"]["spec"]["channel"] == "fast"
    assert review["request"]["options"]["fieldManager"] == "kubectl-edit"


def test_given_a_mutating_webhook_then_its_patch_is_stored_and_validators_see_the_result(
    api: client.ApiClient, custom: client.CustomObjectsApi, webhook: WebhookServer, ca: KeyPair
):
    def decide(request: dict[str, Any]) -> dict[str, Any]:
        if request["object"]["metadata"].get("labels", {}).get("mutated"):
            return {"allowed": True}
        patch = [{"op": "add", "path": "/metadata/labels", "value": {"mutated": "yes"}}]
        return {"allowed": True, "patchType": "JSONPatch", "patch": json_patch(patch)}

    webhook.decide = decide
    _register(api, webhook_configuration("validate", ca.certificate_pem, kyma_rules("CREATE")))
    _register(api, webhook_configuration("mutate", ca.certificate_pem, kyma_rules("CREATE"), mutating=True))

    created = custom.create_namespaced_custom_object(*KYMAS, kyma("k"))

    assert created["metadata"]["labels"] == {"mutated": "yes"}
    assert [r["path"] for r in webhook.reviews] == ["/mutate", "/validate"]
    assert webhook.reviews[1]["request"]["object"]["metadata"]["labels"] == {"mutated": "yes"}


def test_given_webhooks_on_everything_then_webhook_configurations_themselves_are_never_sent(
    api: client.ApiClient, webhook: WebhookServer, ca: KeyPair
):
    everything = [{"apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"], "operations": ["*"]}]
    _register(api, webhook_configuration("all", ca.certificate_pem, everything))

    _register(api, webhook_configuration("second", ca.certificate_pem, everything))
    client.AdmissionregistrationV1Api(api).delete_validating_webhook_configuration("second")

    assert webhook.reviews == []


def test_given_a_change_stored_while_an_update_was_in_admission_then_the_update_is_made_again_as_sent(
    api: client.ApiClient,
    custom: client.CustomObjectsApi,
    webhook: WebhookServer,
    ca: KeyPair,
    kyma_runtime: RuntimeEmulator,
):
    custom.create_namespaced_custom_object(*KYMAS, kyma("k"))
    webhook.delay = 0.3
    _register(api, webhook_configuration("validate", ca.certificate_pem, kyma_rules("UPDATE")))
    labelled = {"metadata": {"labels": {"a": "1"}}}
    patch = threading.Thread(
        target=custom.patch_namespaced_custom_object,
        args=(*KYMAS, "k", labelled),
        kwargs={"_content_type": "application/merge-patch+json"},
    )

    patch.start()
    while not webhook.reviews:  # the patch is in admission
        time.sleep(0.01)
    # An update without a resourceVersion (last write wins), planned on the object the patch is
    # changing: once the patch is stored, it is planned again from the body as sent.
    replaced = custom.replace_namespaced_custom_object(*KYMAS, "k", kyma("k", channel="fast"))
    patch.join()

    objects = [review["request"]["object"] for review in webhook.reviews]
    assert [o["metadata"].get("labels") for o in objects] == [{"a": "1"}, None, None]
    assert [o["spec"]["channel"] for o in objects] == ["regular", "fast", "fast"]
    assert objects[2]["metadata"]["resourceVersion"] != objects[1]["metadata"]["resourceVersion"]
    stored = kyma_runtime.get_object("kymas", "k", "kyma-system")
    assert stored["spec"] == {"channel": "fast"} and "labels" not in stored["metadata"]
    assert replaced["metadata"]["resourceVersion"] == stored["metadata"]["resourceVersion"]
