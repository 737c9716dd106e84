"""The runtime watcher's webhook, fuzzed with what an API server (or anyone reaching its port)
might send: well-formed reviews of any operation, sub-resource and object, deeply nested objects,
huge numbers, broken reviews, garbage bytes, odd paths and methods.

Invariants: a well-formed review is always allowed and answered with its own uid; anything else
is a 4xx with a JSON ``detail``; never a 5xx; the webhook still answers afterwards."""

from __future__ import annotations

import json
import uuid

from hypothesis import given
from hypothesis import strategies as st

from pki.crypto import certificate_to_pem
from tests.fuzz.conftest import count
from tests.fuzz.test_documents import texts, values
from tests.watchers.runtime.conftest import (  # noqa: F401 - the watcher's fixtures
    listener,
    pki,
    start_watcher,
    tls_files,
    watcher,
)
from tests.watchers.runtime.support import WebhookClient, create, kyma

OPERATIONS = ["CREATE", "UPDATE", "DELETE", "CONNECT"]
objects = st.one_of(
    st.builds(lambda name, spec, status: kyma(name, spec=spec, status=status), texts, values, values),
    values,
)


def review(operation: str, obj, old, sub_resource: str, uid: str, depth: int) -> bytes:
    request = {
        "uid": uid,
        "kind": {"group": "operator.kyma-project.io", "version": "v1beta2", "kind": "Kyma"},
        "operation": operation,
        "subResource": sub_resource,
        "object": obj,
        "oldObject": old,
    }
    text = json.dumps({"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1", "request": request})
    if depth and isinstance(obj, dict):  # nest the new spec deeper than json.dumps could write it
        text = text.replace(
            '"request": {', '"request": {"deep": ' + '{"x":' * depth + "1" + "}" * depth + ", ", 1
        )
    return text.encode()


def test_the_webhook_takes_anything(watcher, pki, door):  # noqa: F811
    door("runtime-watcher")

    @given(
        operation=st.sampled_from(OPERATIONS),
        obj=objects,
        old=objects,
        sub_resource=st.sampled_from(["", "status", "scale", "STATUS"]),
        depth=st.sampled_from([0, 0, 0, 500, 2000]),
        garbage=st.one_of(st.none(), st.binary(max_size=64), st.just(b"[" * 20_000)),
        path=st.sampled_from(["/validate/kyma", "/validate/kyma", "/validate/", "/other", "/validate/a%20b"]),
        method=st.sampled_from(["POST", "POST", "POST", "GET", "PUT"]),
    )
    def run(operation, obj, old, sub_resource, depth, garbage, path, method):
        count("runtime-watcher")
        uid = str(uuid.uuid4())
        body = garbage if garbage is not None else review(operation, obj, old, sub_resource, uid, depth)
        webhook = WebhookClient(watcher.webhook_port, certificate_to_pem(pki.ca_old.certificate))
        try:
            status, headers, data = webhook.request(method, path, body)
        finally:
            webhook.close()
        assert status < 500, data[:300]
        answer = json.loads(data)
        if status == 200:
            assert answer["response"]["uid"] == uid and answer["response"]["allowed"] is True
        else:
            assert headers["Content-Type"] == "application/json" and answer["detail"]
        needs_object = operation in ("CREATE", "UPDATE")
        needs_old = operation in ("UPDATE", "DELETE")
        well_formed = (
            garbage is None
            and method == "POST"
            and path == "/validate/kyma"
            and (isinstance(obj, dict) or (obj is None and not needs_object))
            and (isinstance(old, dict) or (old is None and not needs_old))
        )
        if well_formed:
            assert status == 200, answer
        webhook = WebhookClient(watcher.webhook_port, certificate_to_pem(pki.ca_old.certificate))
        try:
            assert webhook.review("kyma", create("still-there"))["response"]["allowed"] is True
        finally:
            webhook.close()

    run()
