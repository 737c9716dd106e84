"""Fixtures of the reconciler tests."""

from __future__ import annotations

import pytest

from fleet.models import KymaState, ModuleConfig
from pki import services as pki
from tests.reconciler.helpers import heartbeat, run
from tests.support import runtimes as support
from tests.support.runtimes import emulator_host, runtimes  # noqa: F401 - fixtures


@pytest.fixture
def settled(runtimes):  # noqa: F811 - (the fixture imported above)
    """A Ready Kyma with keda reported Ready by its manager and a live runtime watcher."""
    pki.ca_bootstrap()
    support.klm_watcher()
    support.keda_module()
    runtime = runtimes()
    kyma = support.connected_kyma(runtime)
    heartbeat(kyma)
    run(kyma, "spec changed")
    ModuleConfig.objects.filter(kyma=kyma).update(status={"state": "Ready"})
    kyma = run(kyma, "module status reported")
    assert kyma.state == KymaState.READY
    return kyma, runtime
