"""Workers and the listener through a broker outage: a real Redis of the test's own, stopped and
started again (controlplane/broker.py, controlplane/worker.py, listener/app.py)."""

from __future__ import annotations

import http.client
import json
import time

import pytest
import redis as redis_client
from django.utils import timezone

from controlplane.celery import app
from fleet.models import ReconcileRecord
from pki import services as pki
from tests.support.listener import Credentials, event_body, klm_watcher, start_listener
from tests.support.processes import start_worker
from tests.support.runtimes import connected_kyma, keda_module
from tests.support.services import OwnRedis

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def wait(condition, what: str, timeout: float, *procs):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if found := condition():
            return found
        time.sleep(0.05)
    raise AssertionError(f"{what} did not happen within {timeout} s\n" + "\n".join(p.output() for p in procs))


@pytest.fixture
def redis(tmp_path):
    server = OwnRedis(tmp_path / "redis").start()
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def catalog():
    pki.ca_bootstrap()
    klm_watcher()
    keda_module()


def unacked(server: OwnRedis) -> int:
    """Messages a worker holds (received, not acknowledged): kombu keeps them in this hash."""
    return redis_client.Redis.from_url(server.url).hlen("unacked")


def test_given_a_worker_holding_a_task_when_redis_stops_and_starts_then_it_lives_and_runs_it_at_once(
    redis, runtimes
):
    kyma = connected_kyma(runtimes())
    worker = start_worker(concurrency=1, CELERY_BROKER_URL=redis.url, WORKER_RECONNECT_MAX="1")
    try:
        with app.connection_for_write(redis.url) as conn:  # a reconcile due in 3 s: the worker holds it
            app.send_task(
                "controlplane.kyma_reconcile",
                args=[kyma.pk],
                kwargs={"reason": "test"},
                countdown=3,
                connection=conn,
            )
        worker.wait_for(lambda: unacked(redis) == 1, 30, "the worker holds the task")
        redis.stop()
        worker.wait_for(lambda: "broker unreachable" in worker.output(), 30, "the worker noticed")
        time.sleep(3)  # the task's ETA passes while the broker is away (an outage, not a condition)
        redis.start()
        back = timezone.now()
        # Before: AttributeError("'NoneType' object has no attribute 'hostname'") ended the worker,
        # or (had it lived) the held message waited for the visibility timeout, 600 s.
        worker.wait_for(
            lambda: ReconcileRecord.objects.filter(kyma_id=kyma.pk, started_at__gte=back).exists(),
            10,
            "the held reconcile ran after the broker's return",
        )
        assert worker.proc.poll() is None, worker.output()
        assert "Unrecoverable error" not in worker.output()
        wait(lambda: unacked(redis) == 0, "nothing is left held", 10, worker)
    finally:
        worker.stop()


def post_event(port: int, creds: Credentials) -> tuple[int, dict[str, str], dict]:
    conn = http.client.HTTPSConnection("localhost", port, context=creds.context(), timeout=10)
    try:
        conn.request(
            "POST",
            "/v2/lifecycle-manager/event",
            body=json.dumps(event_body()),
            headers={"Content-Type": "application/json"},
        )
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), json.loads(response.read())
    finally:
        conn.close()


def test_given_redis_down_when_an_event_comes_then_503_retry_after_and_a_reconcile_soon_after_the_return(
    redis, runtimes
):
    kyma = connected_kyma(runtimes())
    creds = Credentials.for_kyma(kyma)
    listener = start_listener(CELERY_BROKER_URL=redis.url)
    worker = start_worker(CELERY_BROKER_URL=redis.url, WORKER_RECONNECT_MAX="1")
    try:
        redis.stop()
        status, headers, body = post_event(listener.port, creds)
        assert status == 503, body
        assert headers.get("Retry-After") == "2"
        assert "unavailable" in body["detail"]
        redis.start()
        back = timezone.now()
        status, _, body = post_event(listener.port, creds)  # the watcher's retry
        assert status == 200, body
        wait(
            lambda: ReconcileRecord.objects.filter(kyma_id=kyma.pk, started_at__gte=back).exists(),
            "a reconcile after the broker's return",
            10,
            worker,
            listener.process,
        )
        assert worker.proc.poll() is None
    finally:
        worker.stop()
        listener.stop()
