"""deploy/istio and watchers.gateway: the Istio v1 shape, and the renderer's routing decisions."""

from __future__ import annotations

import json
import re

import kubernetes_validate
import pytest
from django.conf import settings
from django.test import override_settings

from kernel.documents import schema
from kernel.documents.selectors import selects
from tests.deploy.istio_schema import istio_errors
from tests.deploy.manifests import BASE, ISTIO, KUBERNETES_VERSION, build, by_kind_name, load, merge_maps
from watchers import gateway as routing
from watchers.models import Watcher

HOST = "listener.kcp.example.com"


def watcher(name: str, component: str, **fields) -> Watcher:
    """An unsaved Watcher: the renderer is a pure function of its fields."""
    fields.setdefault(
        "service_info", {"name": f"{component}-events", "namespace": "kcp-system", "port": 8082}
    )
    return Watcher(
        namespace=fields.pop("namespace", "kcp-system"),
        name=name,
        manager=component,
        component=component,
        **fields,
    )


EXAMPLE_WATCHERS = [
    watcher(
        "klm-watcher",
        "lifecycle-manager",
        service_info={"name": "klm-event-service", "namespace": "kcp-system", "port": 8082},
    ),
    watcher(
        "example-module-watcher",
        "example-module-manager",
        service_info={"name": "example-module-events", "namespace": "example-system", "port": 8082},
    ),
]


# --- the static files ---------------------------------------------------------------------------


@pytest.mark.parametrize("filename", ["gateway.yaml", "virtualservice.example.yaml"])
def test_static_istio_documents_have_the_v1_shape(filename):
    for doc in load(ISTIO / filename):
        assert istio_errors(doc) == []


def test_the_structural_check_rejects_what_istio_would():
    (gateway,) = load(ISTIO / "gateway.yaml")
    gateway["apiVersion"] = "networking.istio.io/v1beta1"
    gateway["spec"]["servers"][0]["tls"].pop("credentialName")
    gateway["status"] = {}
    errors = "\n".join(istio_errors(gateway))
    assert "apiVersion" in errors and "'status' was unexpected" in errors
    assert "servers.0.tls" in errors
    service = load(ISTIO / "virtualservice.example.yaml")[0]
    service["spec"]["http"][0]["route"][0]["destination"].pop("port")
    service["spec"]["http"][0]["match"][0]["uri"] = {"exact": "/a", "prefix": "/b"}
    errors = "\n".join(istio_errors(service))
    assert "'port' is a required property" in errors
    assert "http.0.match.0.uri" in errors


def test_example_gateway_is_what_the_renderer_makes():
    (static,) = load(ISTIO / "gateway.yaml")
    assert static == routing.gateway(hosts=[HOST])


def test_example_gateway_terminates_mutual_tls_with_a_credential():
    (static,) = load(ISTIO / "gateway.yaml")
    (server,) = static["spec"]["servers"]
    assert server["tls"]["mode"] == "MUTUAL"
    assert re.fullmatch(schema.DNS_SUBDOMAIN, server["tls"]["credentialName"])
    assert server["port"] == {"number": 443, "name": "https-watcher", "protocol": "HTTPS"}


@override_settings(LISTENER_BIND="0.0.0.0:8443")
def test_example_virtual_services_are_what_the_renderer_makes():
    services, unbound = routing.virtual_services(EXAMPLE_WATCHERS, gateway_doc=routing.gateway(hosts=[HOST]))
    assert unbound == []
    assert load(ISTIO / "virtualservice.example.yaml") == services


def test_the_default_watcher_selector_selects_the_example_gateway():
    (static,) = load(ISTIO / "gateway.yaml")
    assert selects(Watcher().gateway_or_default["selector"], static["metadata"]["labels"])


def test_ingress_gateway_patch_forwards_the_client_certificate():
    (patch,) = load(ISTIO / "ingressgateway-xfcc-patch.yaml")
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "istio-ingressgateway", "namespace": "istio-system"},
        "spec": {
            "selector": {"matchLabels": {"istio": "ingressgateway"}},
            "template": {
                "metadata": {"labels": {"istio": "ingressgateway"}},
                "spec": {"containers": [{"name": "istio-proxy", "image": "auto"}]},
            },
        },
    }
    patched = merge_maps(deployment, patch)
    kubernetes_validate.validate(patched, KUBERNETES_VERSION, strict=True)
    proxy_config = json.loads(patched["spec"]["template"]["metadata"]["annotations"]["proxy.istio.io/config"])
    assert proxy_config == {"gatewayTopology": {"forwardClientCertDetails": "SANITIZE_SET"}}


# --- routing decisions -----------------------------------------------------------------------------


@override_settings(LISTENER_RECONCILE_COMPONENT="lifecycle-manager", LISTENER_BIND="0.0.0.0:8443")
def test_reconcile_component_goes_to_the_listener_with_heartbeats():
    service = routing.virtual_service(EXAMPLE_WATCHERS[0], gateway="kcp-system/watcher", hosts=[HOST])
    (http,) = service["spec"]["http"]
    assert [m["uri"]["exact"] for m in http["match"]] == [
        "/v1/lifecycle-manager/event",
        "/v2/lifecycle-manager/event",
        "/watcher/heartbeat",
    ]
    assert http["route"] == [
        {
            "destination": {
                "host": "controlplane-listener.kcp-system.svc.cluster.local",
                "port": {"number": 8443},
            }
        }
    ]


@override_settings(LISTENER_RECONCILE_COMPONENT="lifecycle-manager")
def test_other_components_go_to_their_service_info_without_heartbeats():
    service = routing.virtual_service(EXAMPLE_WATCHERS[1], gateway="kcp-system/watcher", hosts=[HOST])
    (http,) = service["spec"]["http"]
    assert "/watcher/heartbeat" not in [m["uri"]["exact"] for m in http["match"]]
    assert http["route"][0]["destination"] == {
        "host": "example-module-events.example-system.svc.cluster.local",
        "port": {"number": 8082},
    }


@override_settings(
    LISTENER_RECONCILE_COMPONENT="example-module-manager", LISTENER_SERVICE_NAME="kcp-listener"
)
def test_the_reconcile_component_and_listener_service_follow_settings():
    service = routing.virtual_service(EXAMPLE_WATCHERS[1], gateway="kcp-system/watcher", hosts=[HOST])
    destination = service["spec"]["http"][0]["route"][0]["destination"]
    assert destination["host"] == "kcp-listener.kcp-system.svc.cluster.local"


def test_virtual_service_is_named_namespaced_labelled_and_owned_like_its_watcher():
    service = routing.virtual_service(EXAMPLE_WATCHERS[1], gateway="kcp-system/watcher", hosts=[HOST])
    assert service["metadata"] == {
        "name": "example-module-watcher",
        "namespace": "kcp-system",
        "labels": {"operator.kyma-project.io/managed-by": "kyma"},
        "annotations": {"controlplane.kyma-project.io/owned-by-watcher": "kcp-system/example-module-watcher"},
    }
    assert service["spec"]["gateways"] == ["kcp-system/watcher"]
    assert service["spec"]["hosts"] == [HOST]


@pytest.mark.parametrize(
    "name",
    ["module.watcher.example.com", "a" * 63 + ".b", "x" * 253, "9-lives.example"],
)
def test_long_or_dotted_watcher_names_become_distinct_dns_labels(name):
    derived = routing.resource_name(watcher(name, "c"))
    assert len(derived) <= 63
    assert re.fullmatch(schema.DNS_LABEL, derived)
    assert derived != routing.resource_name(watcher(name + "x", "c"))
    assert derived != routing.resource_name(watcher(name, "c", namespace="other"))


def test_a_watcher_name_that_is_already_a_label_is_kept():
    assert routing.resource_name(watcher("klm-watcher", "c")) == "klm-watcher"


@pytest.mark.parametrize(
    ("selector", "matches"),
    [
        ({}, True),
        ({"matchLabels": {"operator.kyma-project.io/watcher-gateway": "default"}}, True),
        ({"matchLabels": {"operator.kyma-project.io/watcher-gateway": "other"}}, False),
        ({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["edge", "core"]}]}, True),
        ({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["edge"]}]}, False),
        ({"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["a"]}]}, True),
        ({"matchExpressions": [{"key": "tier", "operator": "Exists"}]}, True),
        ({"matchExpressions": [{"key": "zone", "operator": "Exists"}]}, False),
        ({"matchExpressions": [{"key": "zone", "operator": "DoesNotExist"}]}, True),
        (
            {
                "matchLabels": {"operator.kyma-project.io/watcher-gateway": "default"},
                "matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}],
            },
            False,
        ),
    ],
)
def test_gateway_selector_follows_kubernetes_label_selector_rules(selector, matches):
    labels = {"operator.kyma-project.io/watcher-gateway": "default", "tier": "edge"}
    assert selects(selector, labels) is matches


def test_watchers_selecting_another_gateway_are_left_unbound():
    other = watcher("elsewhere", "other-manager", gateway={"selector": {"matchLabels": {"gw": "other"}}})
    services, unbound = routing.virtual_services(
        [*EXAMPLE_WATCHERS, other], gateway_doc=routing.gateway(hosts=[HOST])
    )
    assert [s["metadata"]["name"] for s in services] == ["example-module-watcher", "klm-watcher"]
    assert unbound == [other]


def test_gateway_without_hosts_is_refused():
    with pytest.raises(ValueError, match="host"):
        routing.gateway(hosts=[])
    with pytest.raises(ValueError, match="host"):
        routing.virtual_service(EXAMPLE_WATCHERS[0], gateway="kcp-system/watcher", hosts=[])


def test_listener_service_in_the_manifests_is_the_renderer_default():
    objects = by_kind_name(build(BASE))
    service = objects[("Service", "controlplane-listener")]
    assert service["metadata"]["name"] == settings.LISTENER_SERVICE_NAME
    assert service["metadata"]["namespace"] == settings.LISTENER_SERVICE_NAMESPACE
