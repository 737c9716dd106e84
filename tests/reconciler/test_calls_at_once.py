"""A reconcile makes the runtime calls that do not depend on each other at once
(``RUNTIME_PARALLEL_CALLS``, :mod:`fleet.k8s.parallel`) when there are enough of them to be worth
new connections: a runtime is a round trip away, so a first reconcile writes what the runtime
watcher's pod needs in one wave, and a full reconcile reads the watcher's objects at once. A
periodic no-op's 3 reads go one after the other on the one connection its client keeps between
reconciles. The emulated runtime holds every answer for a while (its latency), so calls made at
once overlap there (``counts.peak``) and calls made in turn do not."""

from __future__ import annotations

import time

import pytest

from fleet import queue
from fleet.models import Kyma, KymaState, ReconcileRecord
from pki import services as pki
from reconciler.run import kyma_reconcile_run
from tests.reconciler.helpers import run
from tests.support.runtimes import connected_kyma, keda_module, klm_watcher

pytestmark = pytest.mark.django_db

LATENCY = 0.1  # seconds the runtime holds each answer


def one_connection_left(runtime) -> bool:
    """Whether the runtime sees a single connection of the client (the others' closing is seen
    by the server a moment after the client closed them)."""
    deadline = time.monotonic() + 10
    while runtime.open_connections > 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    return runtime.open_connections == 1


def test_given_a_periodic_no_op_then_its_three_reads_go_in_turn_on_one_connection(settled):
    kyma, runtime = settled
    runtime.faults.latency = LATENCY
    runtime.counts.reset()
    kyma = run(kyma, queue.PERIODIC_REASON, full=False)
    assert (runtime.counts.reads, runtime.counts.writes, runtime.counts.peak) == (3, 0, 1)
    assert kyma.state == KymaState.READY
    assert one_connection_left(runtime)


def test_given_a_full_reconcile_then_the_watcher_objects_are_read_at_once(settled):
    kyma, runtime = settled
    runtime.faults.latency = LATENCY
    runtime.counts.reset()
    run(kyma, "reconcile now")
    # the watcher's 2 lists (NetworkPolicies, Services) and 4 GETs (PriorityClass, Secret,
    # Deployment, webhooks)
    assert runtime.counts.peak == 6
    assert runtime.counts.writes == 0
    assert one_connection_left(runtime)  # the client keeps one between reconciles


def test_given_one_call_at_a_time_then_the_same_reads_are_made_in_turn(settled, settings):
    settings.RUNTIME_PARALLEL_CALLS = 1
    kyma, runtime = settled
    runtime.faults.latency = LATENCY
    runtime.counts.reset()
    run(kyma, "reconcile now")
    assert runtime.counts.peak == 1 and runtime.counts.reads >= 6


def test_given_a_first_reconcile_then_the_watcher_objects_its_pod_needs_go_at_once_and_in_groups(
    runtimes, settings
):
    settings.RUNTIME_PARALLEL_CALLS = 3
    pki.ca_bootstrap()
    klm_watcher()
    keda_module()
    runtime = runtimes()
    kyma = connected_kyma(runtime)
    runtime.faults.latency = LATENCY
    runtime.counts.reset()
    kyma_reconcile_run(kyma.pk)
    assert runtime.counts.peak == 3  # (the PriorityClass, 4 NetworkPolicies, Secret, 2 Services)
    record = ReconcileRecord.objects.filter(kyma=kyma).latest("pk")
    created = {c["resource"] for c in record.changes if c.get("action") == "created"}
    assert {
        "PriorityClass skr-webhook-priority",
        "Secret kyma-system/skr-webhook-tls",
        "Service kyma-system/skr-webhook",
        "Service kyma-system/skr-webhook-metrics",
        "Deployment kyma-system/skr-webhook",
        "ValidatingWebhookConfiguration skr-webhook",
    } <= created
    assert one_connection_left(runtime)
    # noted as seen in place: the next reconcile compares instead of applying blind
    runtime.faults.latency = 0
    runtime.counts.reset()
    kyma_reconcile_run(kyma.pk)
    assert runtime.counts.count("apply", "secrets") == 0
    assert Kyma.objects.get(pk=kyma.pk).state in (KymaState.PROCESSING, KymaState.READY)
