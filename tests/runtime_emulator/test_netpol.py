"""NetworkPolicy evaluation of the loopback kubelet: a deny-all namespace cuts the runtime watcher off
until the policies rendered with it allow its ports."""

from __future__ import annotations

import pytest

from runtime_emulator import catalog, errors, netpol
from runtime_emulator.kubelet import NETWORK_POLICIES
from watchers.rendering import network_policies

DENY_ALL = {"spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}}
WATCHER = {"app": "skr-webhook"}


def test_the_kubelet_reads_the_emulators_network_policies():
    rtype = catalog.Catalog().resolve("networkpolicies")
    assert NETWORK_POLICIES == rtype.storage == errors.qualified("networkpolicies", "networking.k8s.io")


def test_without_policies_everything_passes():
    assert netpol.allows([], WATCHER, netpol.EGRESS, 8443)


@pytest.mark.parametrize(
    ("direction", "port", "protocol"),
    [("Ingress", 8443, "TCP"), ("Ingress", 2112, "TCP"), ("Egress", 8443, "TCP"), ("Egress", 53, "UDP")],
)
def test_deny_all_blocks_what_the_watcher_needs_and_its_policies_allow_it(
    settings, direction, port, protocol
):
    settings.WATCHER_KCP_ADDR = "gateway.kcp.example.com:8443"
    assert not netpol.allows([DENY_ALL], WATCHER, direction, port, protocol)
    assert netpol.allows([DENY_ALL, *network_policies()], WATCHER, direction, port, protocol)


def test_the_watchers_policies_allow_nothing_else_and_select_only_its_pod(settings):
    settings.WATCHER_KCP_ADDR = "gateway.kcp.example.com:8443"
    policies = [DENY_ALL, *network_policies()]
    assert not netpol.allows(policies, WATCHER, netpol.EGRESS, 5432)
    assert not netpol.allows(policies, WATCHER, netpol.INGRESS, 9090)
    assert not netpol.allows(policies, {"app": "other"}, netpol.INGRESS, 8443)


def test_a_policy_with_egress_rules_isolates_egress_even_without_policy_types():
    policy = {"spec": {"podSelector": {"matchLabels": WATCHER}, "egress": [{"ports": [{"port": 443}]}]}}
    assert netpol.allows([policy], WATCHER, netpol.EGRESS, 443)
    assert not netpol.allows([policy], WATCHER, netpol.EGRESS, 80)
    assert not netpol.allows([policy], WATCHER, netpol.INGRESS, 80)  # Ingress is always implied
