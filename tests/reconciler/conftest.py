"""Fixtures of the reconciler tests."""

from __future__ import annotations

import pytest

from fleet.k8s.client import client_forget
from fleet.models import KymaState, ModuleConfig
from pki import services as pki
from tests.reconciler.helpers import heartbeat, run
from tests.support import runtimes as support
from tests.support.runtimes import emulator_host, runtimes  # noqa: F401 - fixtures


@pytest.fixture
def new_runtime(runtimes):  # noqa: F811 - (the fixture imported above)
    """``(runtime, kyma)``: a runtime no reconcile has touched yet and its Kyma (keda enabled),
    with the CA and the klm Watcher in place: what a first reconcile starts from. No client of
    this worker has called the runtime (nothing discovered), and its request counts start now."""
    pki.ca_bootstrap()
    support.klm_watcher()
    support.keda_module()
    runtime = runtimes()
    kyma = support.connected_kyma(runtime)
    client_forget(kyma.pk)
    runtime.counts.reset()
    return runtime, kyma


@pytest.fixture
def settled(new_runtime):
    """A Ready Kyma with keda reported Ready by its manager and a live runtime watcher."""
    runtime, kyma = new_runtime
    heartbeat(kyma)
    run(kyma, "spec changed")
    ModuleConfig.objects.filter(kyma=kyma).update(status={"state": "Ready"})
    kyma = run(kyma, "module status reported")
    assert kyma.state == KymaState.READY
    return kyma, runtime
