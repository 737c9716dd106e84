"""The PodSecurity admission plugin, for the "restricted" level only.

A namespace labelled ``pod-security.kubernetes.io/enforce: restricted`` refuses Pods that break
the "restricted" Pod Security Standard with a 403 whose message has the real plugin's shape
(``pods "x" is forbidden: violates PodSecurity "restricted:latest": <check> (<detail>), ...``).
As on a real server, workload objects (Deployments) are admitted anyway; their pods are not, so
the deployment controller reports ``ReplicaFailure`` (``FailedCreate``) with that message and no
pod runs. Checked: privilege escalation, capabilities, non-root, seccomp, privileged containers,
host namespaces and hostPath volumes; other checks of the standard (volume types, sysctls, ...)
are left out, as nothing we render could trip them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

ENFORCE_LABEL = "pod-security.kubernetes.io/enforce"
RESTRICTED = "restricted"


def enforced(namespace: Mapping[str, Any] | None) -> bool:
    """Whether a namespace object enforces the "restricted" level."""
    labels = ((namespace or {}).get("metadata") or {}).get("labels") or {}
    return labels.get(ENFORCE_LABEL) == RESTRICTED


def _containers(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [*(spec.get("initContainers") or ()), *(spec.get("containers") or ())]


def _names(containers: list[Mapping[str, Any]]) -> str:
    quoted = ", ".join(f'"{c.get("name", "")}"' for c in containers)
    return f"container {quoted}" if len(containers) == 1 else f"containers {quoted}"


def _must(containers: list[Mapping[str, Any]], what: str) -> str:
    return f"{_names(containers)} must {what}"


def violations(spec: Mapping[str, Any]) -> list[str]:
    """The "restricted" checks a pod spec fails, in the plugin's wording and order."""
    pod = spec.get("securityContext") or {}
    containers = _containers(spec)
    found: list[str] = []

    def context(c: Mapping[str, Any]) -> Mapping[str, Any]:
        return c.get("securityContext") or {}

    if any(spec.get(key) for key in ("hostNetwork", "hostPID", "hostIPC")):
        found.append("host namespaces (hostNetwork=true, hostPID=true or hostIPC=true)")
    privileged = [c for c in containers if context(c).get("privileged")]
    if privileged:
        found.append(f"privileged ({_must(privileged, 'not set securityContext.privileged=true')})")
    escalating = [c for c in containers if context(c).get("allowPrivilegeEscalation") is not False]
    if escalating:
        what = "set securityContext.allowPrivilegeEscalation=false"
        found.append(f"allowPrivilegeEscalation != false ({_must(escalating, what)})")
    capable = [
        c for c in containers if "ALL" not in ((context(c).get("capabilities") or {}).get("drop") or ())
    ]
    if capable:
        what = 'set securityContext.capabilities.drop=["ALL"]'
        found.append(f"unrestricted capabilities ({_must(capable, what)})")
    if any(v.get("hostPath") for v in spec.get("volumes") or ()):
        found.append("restricted volume types (volumes must not use hostPath)")
    if pod.get("runAsNonRoot") is not True:
        rooted = [c for c in containers if context(c).get("runAsNonRoot") is not True]
        if rooted:
            what = "set securityContext.runAsNonRoot=true"
            found.append(f"runAsNonRoot != true (pod or {_must(rooted, what)})")
    if pod.get("runAsUser") == 0 or any(context(c).get("runAsUser") == 0 for c in containers):
        found.append("runAsUser=0 (pod and containers must not set runAsUser=0)")
    if ((pod.get("seccompProfile") or {}).get("type")) not in ("RuntimeDefault", "Localhost"):
        unconfined = [
            c
            for c in containers
            if ((context(c).get("seccompProfile") or {}).get("type")) not in ("RuntimeDefault", "Localhost")
        ]
        if unconfined:
            what = 'set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost"'
            found.append(f"seccompProfile (pod or {_must(unconfined, what)})")
    return found


def refusal(namespace: Mapping[str, Any] | None, spec: Mapping[str, Any]) -> str:
    """Why a namespace refuses a pod with this spec (``""``: admitted)."""
    if not enforced(namespace):
        return ""
    found = violations(spec)
    return f'violates PodSecurity "restricted:latest": {", ".join(found)}' if found else ""
