"""One behaviour suite for both stores of the queue mark (fleet.queue.marks): the database store
always, the Redis store whenever the tests run with a Redis broker (CI's PostgreSQL + Redis pass).
Each store is driven through the ``ReconcileFlags`` interface only: what one store guarantees, the
other must too."""

from __future__ import annotations

import datetime as dt
import time
import uuid
from collections.abc import Iterator

import pytest
from django.conf import settings
from django.utils import timezone

from fleet.queue.changes import MAX_CHANGES
from fleet.queue.marks import FULL, DatabaseFlags, ReconcileFlags, RedisFlags
from tests.factories import KymaFactory

pytestmark = pytest.mark.django_db

STORES = ["database", *(["redis"] if settings.RECONCILE_FLAGS_URL else [])]


@pytest.fixture(params=STORES)
def store(request) -> Iterator[ReconcileFlags]:
    if request.param == "database":
        yield DatabaseFlags()
        return
    redis_store = RedisFlags(settings.RECONCILE_FLAGS_URL, f"test-marks-{uuid.uuid4().hex[:8]}")
    yield redis_store
    keys = list(redis_store.client.scan_iter(match=f"{redis_store.prefix}:*", count=1000))
    if keys:
        redis_store.client.delete(*keys)


def soon(seconds: float = 0) -> dt.datetime:
    return timezone.now() + dt.timedelta(seconds=seconds)


def test_given_a_free_kyma_when_two_claim_then_one_wins_and_the_second_publishes_nothing(store):
    kyma = KymaFactory()
    assert store.claim([kyma.pk], soon(), soon()) == [kyma.pk]
    assert store.claim([kyma.pk], soon(), soon()) == []
    assert store.queued([kyma.pk]) == {kyma.pk}


def test_given_a_mark_when_its_task_starts_then_it_is_gone_and_a_new_claim_wins(store):
    kyma = KymaFactory()
    store.claim([kyma.pk], soon(), soon())
    started = store.started(kyma.pk)
    assert started.found and not started.full and started.not_before is None
    assert store.queued([kyma.pk]) == set()
    assert store.claim([kyma.pk], soon(), soon()) == [kyma.pk]


def test_given_no_mark_when_a_task_starts_then_it_reads_everything(store):
    started = store.started(KymaFactory().pk)
    assert not started.found and started.full


def test_given_a_full_request_when_a_mark_is_there_then_the_task_reads_everything(store):
    kyma = KymaFactory()
    store.claim([kyma.pk], soon(), soon())
    assert store.claim([kyma.pk], soon(), soon(), full=True) == []
    assert store.started(kyma.pk).full


def test_given_a_queued_task_when_events_report_changes_then_it_learns_them_and_when_it_may_read(store):
    kyma = KymaFactory()
    now = timezone.now()
    claimed, eta = store.claim_one(kyma.pk, now, now, None, ["a"])
    assert claimed and eta == now
    need = now + dt.timedelta(seconds=1)
    claimed, start = store.claim_one(kyma.pk, now, now, need, ["b", "a"])
    assert not claimed and abs((start - need).total_seconds()) < 0.001
    started = store.started(kyma.pk)
    assert set(started.changes) == {"a", "b"} and not started.full
    assert abs((started.not_before - need).total_seconds()) < 0.001


def test_given_more_changes_than_a_mark_holds_then_it_asks_for_a_full_reconcile(store):
    kyma = KymaFactory()
    now = timezone.now()
    store.claim_one(kyma.pk, now, now, None, ["first"])
    for number in range(MAX_CHANGES + 2):
        store.claim_one(kyma.pk, now, now, None, [f"change-{number}"], now)
    started = store.started(kyma.pk)
    assert started.full and FULL in started.changes and len(started.changes) <= MAX_CHANGES + 1


def test_given_a_spaced_kyma_when_claimed_then_its_task_is_due_when_the_spacing_ends(store):
    kyma = KymaFactory()
    until = soon(3)
    assert store.space(kyma.pk, until)
    assert not store.space(kyma.pk, soon(5), if_free=True)  # one holds: a provisional one does not
    claimed, eta = store.claim_one(kyma.pk, timezone.now(), timezone.now(), None)
    assert claimed and abs((eta - until).total_seconds()) < 0.001
    assert store.busy([kyma.pk]) == {kyma.pk}
    assert store.space(kyma.pk, None) and store.space(kyma.pk, soon(1), if_free=True)


def test_given_a_starting_task_that_asks_for_spacing_then_the_mark_goes_and_the_next_claim_waits(store):
    kyma = KymaFactory()
    store.claim_one(kyma.pk, timezone.now(), timezone.now(), soon(0.5), ["change-a"], soon(1))
    until = soon(3)
    started = store.started(kyma.pk, space_until=until)
    assert started.found and started.spaced and started.changes == ("change-a",)
    assert store.queued([kyma.pk]) == set()
    claimed, eta = store.claim_one(kyma.pk, timezone.now(), timezone.now(), None)
    assert claimed and abs((eta - until).total_seconds()) < 0.001  # the event's task is due then


def test_given_a_spacing_that_holds_when_a_task_starts_asking_for_one_then_it_is_kept(store):
    kyma = KymaFactory()
    until = soon(3)
    store.space(kyma.pk, until)
    store.claim([kyma.pk], soon(), soon())
    started = store.started(kyma.pk, space_until=soon(1))
    assert started.found and not started.spaced
    claimed, eta = store.claim_one(kyma.pk, timezone.now(), timezone.now(), None)
    assert claimed and abs((eta - until).total_seconds()) < 0.001


def test_given_a_claim_whose_publish_failed_when_released_then_the_mark_is_gone(store):
    kyma, other = KymaFactory(), KymaFactory()
    eta = soon()
    store.claim([kyma.pk, other.pk], timezone.now(), eta)
    store.release([kyma.pk], eta)
    assert store.queued([kyma.pk, other.pk]) == {other.pk}


def test_given_the_second_mark_then_one_urgent_task_waits_beside_the_marked_one(store):
    kyma = KymaFactory()
    assert store.claim_urgent([kyma.pk], timezone.now()) == [kyma.pk]
    assert store.claim_urgent([kyma.pk], timezone.now()) == []
    store.started_urgent(kyma.pk)
    assert store.claim_urgent([kyma.pk], timezone.now()) == [kyma.pk]


def test_given_a_mark_whose_task_never_started_then_it_is_overdue_and_refreshed_once(store):
    kyma = KymaFactory()
    past = timezone.now() - dt.timedelta(seconds=60)
    store.claim([kyma.pk], past, past)
    assert store.queued_count() == 1
    [(found, eta)] = store.overdue(timezone.now() - dt.timedelta(seconds=30), limit=10)
    assert found == kyma.pk
    assert store.refresh(kyma.pk, eta, timezone.now())
    assert not store.refresh(kyma.pk, eta, timezone.now())  # it moved on
    assert store.overdue(timezone.now() - dt.timedelta(seconds=30), limit=10) == []


def test_given_a_mark_older_than_its_ttl_then_it_counts_as_lost_and_is_claimed_again(store, settings):
    settings.RECONCILE_QUEUED_TTL = 1
    kyma = KymaFactory()
    store.claim([kyma.pk], timezone.now(), timezone.now())
    deadline = time.monotonic() + 10
    while not store.claim([kyma.pk], timezone.now(), timezone.now()):
        assert time.monotonic() < deadline, "the mark never counted as lost"
        time.sleep(0.1)
