"""A runtime that keeps changing does not take the worker from the rest of the fleet.

A real Celery worker (threads, one slot) and ``RECONCILE_MIN_SPACING`` 1 s. One Kyma's runtime sends
a storm of events; its reconciles coalesce into one per spacing, each published due when the
spacing ends (the starting reconcile records until when its Kyma is spaced), so its tasks do not
start only to find it is too soon and retry. Another Kyma's single request is reconciled at once.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from fleet import queue
from fleet.models import ReconcileRecord
from tests.factories import KymaFactory
from tests.support.processes import Process, start_worker

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def storm_until(
    check: Callable[[], bool], kyma_id: int, what: str, worker: Process, timeout: float = 60
) -> None:
    """Send the hot Kyma's runtime events (a request every 20 ms) until ``check`` holds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        queue.request_one(kyma_id, countdown=0)
        time.sleep(0.02)
    raise AssertionError(f"{what} did not happen within {timeout} s\n{worker.output()}")


def records(kyma) -> list[ReconcileRecord]:
    return list(ReconcileRecord.objects.filter(kyma_id=kyma.pk).order_by("started_at"))


def test_given_a_runtime_event_storm_then_another_kyma_is_reconciled_before_the_hot_one_again():
    worker = start_worker(concurrency=1, pool="threads", RECONCILE_MIN_SPACING="1")
    try:
        hot, cold = KymaFactory(), KymaFactory()
        storm_until(lambda: len(records(hot)) >= 3, hot.pk, "three reconciles of the hot Kyma", worker)
        before = len(records(hot))
        queue.request([cold.pk], reason="watch-event")
        storm_until(lambda: len(records(cold)) == 1, hot.pk, "the other Kyma's reconcile", worker)
        storm_until(lambda: len(records(hot)) >= before + 5, hot.pk, "five more hot reconciles", worker)
    finally:
        worker.stop()
    # The other Kyma waited for at most the hot reconcile that was running when it was asked for.
    assert records(cold)[0].started_at < records(hot)[before + 1].started_at
    # The hot Kyma's tasks were published due when its spacing ended: they do not start too soon
    # and retry (as each did before: one bounce per spacing). A request that lands in the moment
    # between a task taking its mark and recording the spacing still may (rarely; at most half).
    output = worker.output()
    spaced = len(records(hot)) - 2  # the first two run at once (after a quiet period)
    assert output.count("deferred: reconciled moments ago") <= spaced // 2, output  # before: one per spacing
