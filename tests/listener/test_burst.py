"""A burst of events coalesces: every Kyma is reconciled after its last event, far fewer times
than it got events (real listener, real worker, real broker)."""

from __future__ import annotations

import http.client
import json
import threading
import time

import pytest
from django.db.models import Max, Sum

from fleet.models import ReconcileRecord, ReconcileState
from fleet.queue.requests import reconcile_queued
from listener.models import WatchEventRecord
from pki import services
from tests.factories import KymaFactory
from tests.support.listener import Credentials, event_body, klm_watcher, start_listener
from tests.support.processes import start_worker

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

EVENTS, KYMAS, SENDERS = 1000, 10, 10


def send_burst(port: int, contexts: list, counts: list[int]) -> None:
    """One keep-alive connection per sender; each sender walks over the Kymas round-robin."""

    def sender(index: int) -> None:
        connections = {}
        for number in range(index, EVENTS, SENDERS):
            kyma = number % KYMAS
            conn = connections.get(kyma)
            if conn is None:
                conn = connections[kyma] = http.client.HTTPSConnection(
                    "localhost", port, context=contexts[kyma]
                )
            conn.request(
                "POST",
                "/v2/lifecycle-manager/event",
                body=json.dumps(event_body(name=f"obj-{number}")),
                headers={"Content-Type": "application/json"},
            )
            response = conn.getresponse()
            response.read()
            if response.status == 200:
                counts[index] += 1
        for conn in connections.values():
            conn.close()

    threads = [threading.Thread(target=sender, args=(i,)) for i in range(SENDERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def settled(kyma_ids: list[int], expected_events: int, timeout: float = 60) -> None:
    def events() -> int:
        return WatchEventRecord.objects.aggregate(n=Sum("count"))["n"] or 0

    def quiet() -> bool:
        return not reconcile_queued(kyma_ids) and not ReconcileState.objects.exclude(lease_owner="").exists()

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if quiet() and events() >= expected_events:
            time.sleep(0.5)  # a task may just have been taken
            if quiet():
                return
        time.sleep(0.1)
    raise TimeoutError(
        f"reconciles did not settle: {events()} events recorded, {len(reconcile_queued(kyma_ids))} queued, "
        f"{ReconcileState.objects.exclude(lease_owner='').count()} leased, "
        f"{ReconcileRecord.objects.count()} reconciles"
    )


def test_given_a_burst_of_1000_events_for_10_kymas_then_each_reconciled_after_its_last_event():
    services.ca_bootstrap()
    klm_watcher()
    kymas = [KymaFactory() for _ in range(KYMAS)]
    contexts = [Credentials.for_kyma(kyma).context() for kyma in kymas]
    listener = start_listener(LISTENER_RECONCILE_DELAY="0.05", LISTENER_EVENT_MARGIN="0.02")
    worker = start_worker(concurrency=2)
    try:
        counts = [0] * SENDERS
        send_burst(listener.port, contexts, counts)
        assert sum(counts) == EVENTS
        settled([kyma.pk for kyma in kymas], EVENTS)
    finally:
        listener.stop()
        worker.stop()

    last_event = dict(
        WatchEventRecord.objects.values_list("kyma_id").annotate(last=Max("received_at")).order_by()
    )
    last_reconcile = dict(
        ReconcileRecord.objects.values_list("kyma_id").annotate(last=Max("started_at")).order_by()
    )
    assert set(last_event) == {kyma.pk for kyma in kymas}
    for kyma in kymas:
        assert last_reconcile[kyma.pk] > last_event[kyma.pk], (
            f"{kyma.name} not reconciled after its last event"
        )
    reconciles = ReconcileRecord.objects.count()
    assert reconciles <= EVENTS // 4, f"{reconciles} reconciles for {EVENTS} events: not coalesced"
    print(f"\n{EVENTS} events -> {reconciles} reconciles")
