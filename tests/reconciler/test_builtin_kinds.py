"""Built-in kinds are addressed without discovery: their plural and scope are Kubernetes' own (the
emulator serves them as a conformant API server does), and a runtime's first reconcile asks
discovery only about the module CRs (the Kyma's plural and scope come from the CRD the control
plane installs)."""

from __future__ import annotations

import pytest

from fleet.k8s.client import BUILTIN_RESOURCES
from pki import services as pki
from reconciler.run import kyma_reconcile_run
from runtime_emulator.emulator import RuntimeEmulator
from tests.support.runtimes import connected_kyma, keda_module, klm_watcher

pytestmark = pytest.mark.django_db


def test_every_builtin_kind_has_the_plural_and_scope_an_api_server_serves(runtimes):
    served = {(t.api_version, t.kind): (t.plural, t.namespaced) for t in runtimes().catalog if t.builtin}
    known = {key: (info.plural, info.namespaced) for key, info in BUILTIN_RESOURCES.items()}
    assert known == {key: served[key] for key in known if key in served}
    assert known.keys() <= served.keys(), sorted(known.keys() - served.keys())


def test_a_first_reconcile_asks_discovery_only_about_custom_resources(runtimes):
    pki.ca_bootstrap()
    klm_watcher()
    keda_module()
    runtime: RuntimeEmulator = runtimes()
    kyma = connected_kyma(runtime)
    runtime.counts.reset()

    kyma_reconcile_run(kyma.pk)

    asked = sorted(
        resource for (verb, resource), _ in runtime.counts.snapshot().items() if verb == "discovery"
    )
    builtin_paths = {f"/api/{v}" if "/" not in v else f"/apis/{v}" for v, _ in BUILTIN_RESOURCES}
    assert asked, "the custom resources' group versions are discovered"
    assert not builtin_paths & set(asked), asked
    kyma.refresh_from_db()
    assert kyma.state == "Processing" and runtime.counts.writes > 5  # it did its first reconcile
