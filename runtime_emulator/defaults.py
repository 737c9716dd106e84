"""Defaulting a real API server applies to built-in kinds on every write.

Only the defaults a controller is likely to notice are emulated (a diff between what it wrote and
what it reads back): Secret ``stringData`` folding, Service cluster IPs and port defaults,
Deployment strategy/replicas and the common pod-spec fields, Namespace finalizers and phase, a
PriorityClass's preemption policy (and a ``globalDefault: false`` left out, as Go's omitempty does).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Mapping
from typing import Any

from runtime_emulator import catalog, errors
from runtime_emulator.catalog import ResourceType


def _container(container: dict[str, Any]) -> None:
    image = container.get("image", "")
    last = image.rsplit("/", 1)[-1]
    latest = "@" not in last and (":" not in last or last.endswith(":latest"))
    container.setdefault("imagePullPolicy", "Always" if latest else "IfNotPresent")
    container.setdefault("terminationMessagePath", "/dev/termination-log")
    container.setdefault("terminationMessagePolicy", "File")
    container.setdefault("resources", {})
    for port in container.get("ports") or ():
        port.setdefault("protocol", "TCP")


def pod_spec(spec: dict[str, Any]) -> None:
    """Pod-spec defaults, shared by Pods and Deployment templates."""
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("securityContext", {})
    spec.setdefault("schedulerName", "default-scheduler")
    for container in (*(spec.get("initContainers") or ()), *(spec.get("containers") or ())):
        _container(container)


def _secret(obj: dict[str, Any]) -> None:
    obj.setdefault("type", "Opaque")
    string_data = obj.pop("stringData", None) or {}
    data = obj.get("data") or {}
    for key, value in data.items():
        try:
            base64.b64decode(value, validate=True)
        except (binascii.Error, TypeError, ValueError):
            name = obj["metadata"].get("name", "")
            raise errors.invalid("Secret", "", name, f"data[{key}]", "illegal base64 data") from None
    if string_data:
        obj["data"] = data | {k: base64.b64encode(str(v).encode()).decode() for k, v in string_data.items()}


def _service(obj: dict[str, Any], old: Mapping[str, Any] | None, allocate_ip: Callable[[], str]) -> None:
    spec = obj.setdefault("spec", {})
    spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    if spec["type"] != "ExternalName":
        # The cluster IP is immutable: a PUT that leaves it out keeps the allocated one.
        kept = ((old or {}).get("spec") or {}).get("clusterIP")
        spec.setdefault("clusterIP", kept or allocate_ip())
        spec.setdefault("clusterIPs", [spec["clusterIP"]])
        spec.setdefault("ipFamilies", ["IPv4"])
        spec.setdefault("ipFamilyPolicy", "SingleStack")
        spec.setdefault("internalTrafficPolicy", "Cluster")
    for port in spec.get("ports") or ():
        port.setdefault("protocol", "TCP")
        port.setdefault("targetPort", port.get("port"))


def _deployment(obj: dict[str, Any]) -> None:
    spec = obj.setdefault("spec", {})
    spec.setdefault("replicas", 1)
    spec.setdefault("revisionHistoryLimit", 10)
    spec.setdefault("progressDeadlineSeconds", 600)
    strategy = spec.setdefault("strategy", {"type": "RollingUpdate"})
    if strategy.get("type") == "RollingUpdate":
        strategy.setdefault("rollingUpdate", {"maxUnavailable": "25%", "maxSurge": "25%"})
    pod_spec(spec.setdefault("template", {}).setdefault("spec", {}))


def _priority_class(obj: dict[str, Any]) -> None:
    obj.setdefault("preemptionPolicy", "PreemptLowerPriority")
    if obj.get("globalDefault") is False:
        del obj["globalDefault"]  # omitempty: a real server's answer leaves a false one out


def _namespace(obj: dict[str, Any]) -> None:
    name = obj["metadata"]["name"]
    obj["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = name
    obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])


def apply_defaults(
    rtype: ResourceType, obj: dict[str, Any], old: Mapping[str, Any] | None, allocate_ip: Callable[[], str]
) -> None:
    """Default a freshly built object in place (it must not share structure with stored ones)."""
    if rtype is catalog.SECRETS:
        _secret(obj)
    elif rtype is catalog.SERVICES:
        _service(obj, old, allocate_ip)
    elif rtype is catalog.DEPLOYMENTS:
        _deployment(obj)
    elif rtype is catalog.PODS:
        pod_spec(obj.setdefault("spec", {}))
    elif rtype is catalog.NAMESPACES:
        _namespace(obj)
    elif rtype is catalog.PRIORITY_CLASSES:
        _priority_class(obj)


def initial_status(rtype: ResourceType) -> dict[str, Any] | None:
    """The status a real server gives a new object whose status the client may not set."""
    if rtype is catalog.NAMESPACES:
        return {"phase": "Active"}
    if rtype is catalog.PODS:
        return {"phase": "Pending", "qosClass": "BestEffort"}
    if rtype is catalog.SERVICES:
        return {"loadBalancer": {}}
    return None
