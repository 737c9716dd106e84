"""NetworkPolicy evaluation for the loopback kubelet (:mod:`runtime_emulator.kubelet`).

A pod is isolated in a direction once any policy of its namespace selects it with that direction
in ``policyTypes`` (``Ingress`` is implied; ``Egress`` when the policy has egress rules); it then
reaches or is reached on a port only when some selecting policy has a rule for that protocol and
port (a rule without ports allows every port). Peers (``from``/``to``) are not evaluated: loopback
processes have no pod addresses, so a rule allows any peer, as upstream's "any destination" rules
do. Pod selectors use ``matchLabels`` and ``matchExpressions``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from runtime_emulator import selectors

INGRESS, EGRESS = "Ingress", "Egress"


def _selects(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    return selectors.labels_match(selectors.from_label_selector(selector), labels)


def _types(spec: Mapping[str, Any]) -> set[str]:
    declared = spec.get("policyTypes")
    if declared:
        return set(declared)
    return {INGRESS, EGRESS} if spec.get("egress") else {INGRESS}


def allows(
    policies: Iterable[Mapping[str, Any]],
    pod_labels: Mapping[str, str],
    direction: str,
    port: int,
    protocol: str = "TCP",
) -> bool:
    """Whether traffic of a pod with ``pod_labels`` may pass in ``direction`` on ``protocol/port``."""
    selecting = [
        p["spec"]
        for p in policies
        if _selects((p.get("spec") or {}).get("podSelector") or {}, pod_labels)
        and direction in _types(p.get("spec") or {})
    ]
    if not selecting:
        return True
    for spec in selecting:
        for rule in spec.get(direction.lower()) or ():
            ports = rule.get("ports")
            if not ports:
                return True
            for allowed in ports:
                same_protocol = allowed.get("protocol", "TCP") == protocol
                if same_protocol and allowed.get("port") in (None, port):
                    return True
    return False
