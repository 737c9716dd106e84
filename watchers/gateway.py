"""Istio routing of WatchEvents on Kubernetes: the Gateway and one VirtualService per Watcher.

Behind Istio the ingress gateway ends the runtime watchers' mutual TLS and hands the client
certificate on in ``X-Forwarded-Client-Cert``. Each Watcher gets a VirtualService, as upstream's
lifecycle-manager creates one: ``/v1|v2/<component>/event`` goes to the component that handles it.
Events of ``LISTENER_RECONCILE_COMPONENT`` (and runtime watcher heartbeats) go to our listener,
which reconciles the Kyma; every other component's events go straight to that Watcher's
``serviceInfo``, as upstream does.

A Watcher's ``spec.gateway.selector`` picks the Gateway(s) its VirtualService binds to. Upstream
lists the Gateways matching the selector in the cluster; the control plane does not read the
cluster it runs in, so it renders the Gateway itself and binds a Watcher to it when the selector
matches the rendered Gateway's labels (Kubernetes label-selector rules). A Watcher whose selector
matches nothing is reported, not routed: upstream puts such a Watcher into Error because its
Gateway is not found.

Everything here is a pure function returning plain dicts (no Kubernetes client), so the output is
the same every time and ``manage.py render_gateway`` can print it for ``kubectl apply -f -``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from fleet.k8s.ownership import MANAGED_BY
from kernel.documents import schema
from kernel.documents.selectors import selects

from .models import Watcher

ISTIO_API_VERSION = "networking.istio.io/v1"
OWNER_ANNOTATION = "controlplane.kyma-project.io/owned-by-watcher"
# The label upstream's default Gateway carries; ``watchers.models.DEFAULT_GATEWAY`` selects it.
GATEWAY_LABELS = {"operator.kyma-project.io/watcher-gateway": "default"}
GATEWAY_NAME = "watcher"
GATEWAY_NAMESPACE = "kcp-system"
GATEWAY_SELECTOR = {"istio": "ingressgateway"}
# Secret (in the ingress gateway's namespace) with tls.crt, tls.key and ca.crt: see deploy/istio;
# written by the control plane (pki.gateway) or printed by render_gateway --with-credential.
CREDENTIAL_NAME = settings.GATEWAY_SECRET_NAME
CREDENTIAL_NAMESPACE = settings.GATEWAY_SECRET_NAMESPACE
CONTRACTS = ("v1", "v2")
HEARTBEAT_PATH = "/watcher/heartbeat"
MAX_NAME = 63


@dataclass(frozen=True)
class Destination:
    """Where a route sends requests: a Service's cluster-local name and port."""

    host: str
    port: int

    def as_istio(self) -> dict[str, Any]:
        return {"host": self.host, "port": {"number": self.port}}


def service_host(name: str, namespace: str) -> str:
    return f"{name}.{namespace}.svc.cluster.local"


def listener_destination() -> Destination:
    """Our listener Service; its port is the one the listener binds (``LISTENER_BIND``).

    Name and namespace (``LISTENER_SERVICE_NAME``/``LISTENER_SERVICE_NAMESPACE``) default to
    deploy/kubernetes' Service.
    """
    host = service_host(settings.LISTENER_SERVICE_NAME, settings.LISTENER_SERVICE_NAMESPACE)
    return Destination(host, int(settings.LISTENER_BIND.rpartition(":")[2]))


def handled_by_listener(watcher: Watcher) -> bool:
    return watcher.component == settings.LISTENER_RECONCILE_COMPONENT


def destination(watcher: Watcher) -> Destination:
    """Our listener for the reconcile component; the Watcher's ``serviceInfo`` for all others."""
    if handled_by_listener(watcher):
        return listener_destination()
    info = watcher.service_info
    return Destination(service_host(info["name"], info["namespace"]), int(info["port"]))


def route_paths(watcher: Watcher) -> list[str]:
    """The request paths a Watcher owns: its event endpoints, plus heartbeats for the listener's."""
    paths = [f"/{contract}/{watcher.component}/event" for contract in CONTRACTS]
    if handled_by_listener(watcher):
        paths.append(HEARTBEAT_PATH)
    return paths


def resource_name(watcher: Watcher) -> str:
    """The VirtualService's name: the Watcher's, like upstream, when that is a DNS-1123 label.

    Watcher names may be DNS subdomains (dots, up to 253 characters); those are folded into a
    label of at most 63 characters that ends in a digest of the full name, so two Watchers never
    share a VirtualService.
    """
    if re.fullmatch(schema.DNS_LABEL, watcher.name):
        return watcher.name
    digest = hashlib.sha256(f"{watcher.namespace}/{watcher.name}".encode()).hexdigest()[:8]
    stem = re.sub(r"[^a-z0-9-]+", "-", watcher.name.lower())[: MAX_NAME - len(digest) - 1].strip("-")
    return f"{stem}-{digest}" if stem else f"watcher-{digest}"


def gateway(
    *,
    hosts: list[str],
    name: str = GATEWAY_NAME,
    namespace: str = GATEWAY_NAMESPACE,
    credential_name: str = CREDENTIAL_NAME,
    labels: Mapping[str, str] | None = None,
    selector: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The Gateway that ends the runtime watchers' mutual TLS at the Istio ingress gateway.

    ``credential_name`` names a Secret in the ingress gateway's namespace holding the listener's
    server certificate and key and our CA bundle, which client certificates must chain to.
    Forwarding the client certificate (``X-Forwarded-Client-Cert``) is a setting of the ingress
    gateway's proxy, not of this object: see ``deploy/istio/README.md``.
    """
    if not hosts:
        raise ValueError("a Gateway needs at least one host")
    return {
        "apiVersion": ISTIO_API_VERSION,
        "kind": "Gateway",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {**MANAGED_BY, **(GATEWAY_LABELS if labels is None else labels)},
        },
        "spec": {
            "selector": dict(GATEWAY_SELECTOR if selector is None else selector),
            "servers": [
                {
                    "port": {"number": 443, "name": "https-watcher", "protocol": "HTTPS"},
                    "hosts": list(hosts),
                    "tls": {
                        "mode": "MUTUAL",
                        "credentialName": credential_name,
                        "minProtocolVersion": "TLSV1_2",
                    },
                }
            ],
        },
    }


def gateway_reference(gateway_doc: Mapping[str, Any]) -> str:
    """``namespace/name``, the form a VirtualService in any namespace can bind to."""
    metadata = gateway_doc["metadata"]
    return f"{metadata['namespace']}/{metadata['name']}"


def gateway_hosts(gateway_doc: Mapping[str, Any]) -> list[str]:
    hosts: list[str] = []
    for server in gateway_doc["spec"]["servers"]:
        hosts.extend(host for host in server["hosts"] if host not in hosts)
    return hosts


def virtual_service(watcher: Watcher, *, gateway: str, hosts: list[str]) -> dict[str, Any]:
    """The VirtualService that routes one Watcher's WatchEvents from ``gateway`` to its handler.

    Paths are matched exactly, so one component's routes never shadow another's; Istio merges
    the VirtualServices of all Watchers bound to the same Gateway and host.
    """
    if not hosts:
        raise ValueError("a VirtualService needs at least one host")
    return {
        "apiVersion": ISTIO_API_VERSION,
        "kind": "VirtualService",
        "metadata": {
            "name": resource_name(watcher),
            "namespace": watcher.namespace,
            "labels": dict(MANAGED_BY),
            "annotations": {OWNER_ANNOTATION: watcher.key},
        },
        "spec": {
            "hosts": list(hosts),
            "gateways": [gateway],
            "http": [
                {
                    "name": watcher.key,
                    "match": [{"uri": {"exact": path}} for path in route_paths(watcher)],
                    "route": [{"destination": destination(watcher).as_istio()}],
                }
            ],
        },
    }


def virtual_services(
    watchers: Iterable[Watcher], *, gateway_doc: Mapping[str, Any]
) -> tuple[list[dict[str, Any]], list[Watcher]]:
    """VirtualServices of the Watchers whose gateway selector matches ``gateway_doc``.

    Returns them with the Watchers left out because their selector matches another Gateway.
    """
    labels = gateway_doc["metadata"].get("labels") or {}
    reference, hosts = gateway_reference(gateway_doc), gateway_hosts(gateway_doc)
    routed, unbound = [], []
    for watcher in sorted(watchers, key=lambda w: (w.namespace, w.name)):
        if selects(watcher.gateway_or_default["selector"], labels):
            routed.append(virtual_service(watcher, gateway=reference, hosts=hosts))
        else:
            unbound.append(watcher)
    return routed, unbound
