"""``manage.py render_gateway``: what an operator pipes into ``kubectl apply -f -``."""

from __future__ import annotations

import base64
import io
import json
from unittest.mock import ANY

import kubernetes_validate
import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings

from kernel.documents.yamlio import dump_yaml, load_documents
from tests.deploy.istio_schema import istio_errors
from tests.deploy.manifests import KUBERNETES_VERSION
from watchers.models import Watcher
from watchers.services import watcher_apply, watcher_delete

pytestmark = pytest.mark.django_db

HOST = "listener.kcp.example.com"
RESOURCE = {"group": "operator.kyma-project.io", "version": "*", "resource": "kymas"}
LISTENER = {"host": "controlplane-listener.kcp-system.svc.cluster.local", "port": {"number": 8443}}


def render(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("render_gateway", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def apply_watcher(name: str, manager: str, **fields) -> Watcher:
    fields.setdefault("service_info", {"name": f"{manager}-events", "namespace": "kcp-system", "port": 8082})
    return watcher_apply(
        namespace="kcp-system", name=name, manager=manager, resource_to_watch=RESOURCE, **fields
    )[0]


@pytest.fixture
def fleet() -> dict[str, Watcher]:
    """The lifecycle-manager Watcher, two module Watchers, and one being deleted."""
    watchers = {
        "klm": apply_watcher("klm-watcher", "lifecycle-manager"),
        "module": apply_watcher(
            "module.watcher.example.com",
            "module-manager",
            service_info={"name": "module-events", "namespace": "module-system", "port": 9090},
        ),
        "other": apply_watcher("other-watcher", "other-manager"),
        "gone": apply_watcher("gone-watcher", "gone-manager"),
    }
    Watcher.objects.filter(pk=watchers["gone"].pk).update(
        finalizers=["controlplane.kyma-project.io/runtimes"]
    )
    watchers["gone"].refresh_from_db()
    watcher_delete(watcher=watchers["gone"])
    return watchers


@override_settings(LISTENER_BIND="0.0.0.0:8443")
def test_given_watchers_then_one_gateway_and_one_virtual_service_per_live_watcher(fleet):
    out, err = render("--host", HOST)
    documents = load_documents(out)
    assert [d["kind"] for d in documents] == ["Gateway"] + ["VirtualService"] * 3
    for doc in documents:
        assert istio_errors(doc) == []
    routes = {
        d["metadata"]["annotations"]["controlplane.kyma-project.io/owned-by-watcher"]: d
        for d in documents[1:]
    }
    assert set(routes) == {
        "kcp-system/klm-watcher",
        "kcp-system/module.watcher.example.com",
        "kcp-system/other-watcher",
    }
    assert err == ""


@override_settings(LISTENER_BIND="0.0.0.0:8443")
def test_destinations_are_the_listener_for_lifecycle_manager_and_service_info_for_others(fleet):
    out, _ = render("--host", HOST)
    by_owner = {
        d["metadata"]["annotations"]["controlplane.kyma-project.io/owned-by-watcher"]: d["spec"]["http"][0]
        for d in load_documents(out)[1:]
    }
    klm = by_owner["kcp-system/klm-watcher"]
    assert klm["route"][0]["destination"] == LISTENER
    assert {"uri": {"exact": "/watcher/heartbeat"}} in klm["match"]
    module = by_owner["kcp-system/module.watcher.example.com"]
    assert module["route"][0]["destination"] == {
        "host": "module-events.module-system.svc.cluster.local",
        "port": {"number": 9090},
    }
    assert [m["uri"]["exact"] for m in module["match"]] == [
        "/v1/module-manager/event",
        "/v2/module-manager/event",
    ]


def test_every_virtual_service_binds_to_the_rendered_gateway_and_its_hosts(fleet):
    out, _ = render(
        "--host", HOST, "--host", "watcher.kcp.example.com", "--gateway", "istio-system/kcp-watcher"
    )
    gateway, *services = load_documents(out)
    assert gateway["metadata"]["name"] == "kcp-watcher"
    assert gateway["metadata"]["namespace"] == "istio-system"
    assert gateway["spec"]["servers"][0]["hosts"] == [HOST, "watcher.kcp.example.com"]
    for service in services:
        assert service["spec"]["gateways"] == ["istio-system/kcp-watcher"]
        assert service["spec"]["hosts"] == [HOST, "watcher.kcp.example.com"]
        assert service["metadata"]["namespace"] == "kcp-system"


def test_output_round_trips_through_yaml_and_agrees_with_json(fleet):
    out, _ = render("--host", HOST)
    documents = list(yaml.safe_load_all(out))
    assert dump_yaml(documents) == out
    as_json, _ = render("--host", HOST, "-o", "json")
    listing = json.loads(as_json)
    assert listing["kind"] == "List"
    assert listing["items"] == documents


def test_a_watcher_selecting_another_gateway_is_reported_and_not_routed(fleet):
    apply_watcher(
        "private-watcher", "private-manager", gateway={"selector": {"matchLabels": {"gw": "private"}}}
    )
    out, err = render("--host", HOST)
    owners = [d["metadata"].get("annotations", {}) for d in load_documents(out)]
    assert {"controlplane.kyma-project.io/owned-by-watcher": "kcp-system/private-watcher"} not in owners
    assert "Watcher kcp-system/private-watcher: spec.gateway.selector does not match" in err


def test_without_a_lifecycle_manager_watcher_the_missing_listener_route_is_reported():
    apply_watcher("other-watcher", "other-manager")
    _, err = render("--host", HOST)
    assert "no Watcher for component 'lifecycle-manager'" in err


@override_settings(WATCHER_KCP_ADDR="listener.kcp.example.org:443")
def test_default_host_is_the_address_runtime_watchers_dial(fleet):
    out, _ = render()
    assert load_documents(out)[0]["spec"]["servers"][0]["hosts"] == ["listener.kcp.example.org"]


@override_settings(WATCHER_KCP_ADDR="localhost:8443")
def test_a_local_watcher_address_asks_for_a_host():
    with pytest.raises(CommandError, match="give --host"):
        render()


@pytest.mark.parametrize(
    "args", [["--host", "10.0.0.1"], ["--host", "Not A Host"], ["--host", HOST, "--gateway", "a/b/c"]]
)
def test_bad_arguments_are_refused(args):
    with pytest.raises(CommandError):
        render(*args)


@override_settings(LISTENER_HOSTNAMES=[HOST])
def test_with_credential_the_gateway_secret_holds_the_listener_certificate_and_ca_bundle(fleet):
    out, err = render("--host", HOST, "--with-credential")
    documents = load_documents(out)
    gateway, secret = documents[0], documents[-1]
    kubernetes_validate.validate(secret, KUBERNETES_VERSION, strict=True)
    assert secret["metadata"] == {
        "name": gateway["spec"]["servers"][0]["tls"]["credentialName"],
        "namespace": "istio-system",
        "labels": {"operator.kyma-project.io/managed-by": "kyma"},
        "annotations": {"controlplane.kyma-project.io/server-certificate": ANY},
    }
    data = {key: base64.b64decode(value) for key, value in secret["data"].items()}
    certificate = x509.load_pem_x509_certificate(data["tls.crt"])
    fingerprint = secret["metadata"]["annotations"]["controlplane.kyma-project.io/server-certificate"]
    assert fingerprint == certificate.fingerprint(hashes.SHA256()).hex(":").upper()
    names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert HOST in names.get_values_for_type(x509.DNSName)
    assert b"PRIVATE KEY" in data["tls.key"]
    (ca,) = x509.load_pem_x509_certificates(data["ca.crt"])
    assert certificate.issuer == ca.subject
    assert err == ""


def test_with_credential_a_host_the_certificate_does_not_name_is_reported(fleet):
    _, err = render("--host", HOST, "--with-credential")
    assert f"{HOST} is not in LISTENER_HOSTNAMES" in err
