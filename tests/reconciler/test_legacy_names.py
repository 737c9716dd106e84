"""Runtimes reconciled by earlier versions hold NetworkPolicies under this project's old names
(``skr-webhook-allow-*``): they are deleted once, where the Kyma's record says they are; a new
runtime costs no request for them."""

from __future__ import annotations

import pytest

from fleet.models import Kyma
from pki import services as pki
from reconciler.run import kyma_reconcile_run
from tests.support.runtimes import connected_kyma, keda_module, klm_watcher
from watchers.rendering import LEGACY_NETWORK_POLICIES, NETWORK_POLICIES

pytestmark = pytest.mark.django_db

POLICIES = "networking.k8s.io/v1/networkpolicies"


@pytest.fixture
def runtime(runtimes):
    pki.ca_bootstrap()
    klm_watcher()
    keda_module()
    return runtimes()


def legacy_key(name: str) -> str:
    return f"networking.k8s.io/v1|NetworkPolicy|kyma-system|{name}"


def test_old_named_policies_are_deleted_once(runtime):
    kyma = connected_kyma(runtime)
    kyma_reconcile_run(kyma.pk)
    for name in LEGACY_NETWORK_POLICIES:  # as an earlier version left the runtime and its record
        runtime.create_as_user(
            {
                "apiVersion": "networking.k8s.io/v1",
                "kind": "NetworkPolicy",
                "metadata": {"name": name, "namespace": "kyma-system"},
                "spec": {"podSelector": {}},
            }
        )
    verified = Kyma.objects.get(pk=kyma.pk).runtime_verified
    Kyma.objects.filter(pk=kyma.pk).update(
        runtime_verified={**verified, **{legacy_key(n): ["old", 1] for n in LEGACY_NETWORK_POLICIES}}
    )

    kyma_reconcile_run(kyma.pk)

    left = {p["metadata"]["name"] for p in runtime.list_objects(POLICIES, "kyma-system")}
    assert left == set(NETWORK_POLICIES)
    assert not any(
        legacy_key(n) in Kyma.objects.get(pk=kyma.pk).runtime_verified for n in LEGACY_NETWORK_POLICIES
    )
    runtime.counts.reset()
    kyma_reconcile_run(kyma.pk)
    assert runtime.counts.count("delete") == 0


def test_a_new_runtime_asks_nothing_about_old_names(runtime):
    kyma = connected_kyma(runtime)

    kyma_reconcile_run(kyma.pk)

    assert runtime.counts.count("delete") == 0
