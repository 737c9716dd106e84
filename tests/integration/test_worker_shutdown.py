"""A worker told to stop (SIGTERM: a rolling update, a drained node) mid-reconcile: it ends within
one runtime call, its lease released and the Kyma queued again for another worker."""

from __future__ import annotations

import signal
import time

import pytest

from fleet.models import Kyma, ReconcileRecord
from pki import services as pki
from tests.support.processes import start_worker
from tests.support.runtimes import connected_kyma, keda_module, klm_watcher

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

CALL = 1.0  # every runtime API call takes this long: a whole reconcile takes many of them


def test_given_a_reconcile_in_flight_when_the_worker_gets_sigterm_then_it_hands_the_kyma_back(runtimes):
    pki.ca_bootstrap()
    klm_watcher()
    keda_module()
    runtime = runtimes()
    runtime.faults.latency = CALL
    first = start_worker(concurrency=1, RECONCILE_LEASE_SECONDS="120")
    try:
        kyma = connected_kyma(runtime)
        first.wait_for(
            lambda: Kyma.objects.get(pk=kyma.pk).lease_owner != "", 30, "a reconcile holds the lease"
        )
        first.signal(signal.SIGTERM)
        stopped_at = time.monotonic()
        assert first.proc.wait(30) == 0, first.output()
        took = time.monotonic() - stopped_at
    finally:
        first.stop()
    # A first reconcile makes over a dozen calls (well over 10 s here); the worker stopped within
    # the call in flight and Celery's warm shutdown instead of finishing it.
    assert took < 10 * CALL, f"the worker took {took:.1f} s to stop:\n{first.output()}"
    assert Kyma.objects.get(pk=kyma.pk).lease_owner == "", "the lease was not released"
    assert not ReconcileRecord.objects.filter(kyma_id=kyma.pk).exists()
    runtime.faults.latency = 0
    second = start_worker(concurrency=1)
    try:
        second.wait_for(
            lambda: ReconcileRecord.objects.filter(kyma_id=kyma.pk).exists(),
            60,
            "the handed-back Kyma reconciled by another worker",
        )
    finally:
        second.stop()
