"""Reconcile requests coalesce, survive a dead broker without losing the claim, and never run
twice at once for one Kyma."""

from __future__ import annotations

import datetime as dt
import threading
import time

import pytest
from django.db import transaction
from django.utils import timezone

from fleet import queue
from fleet.models import Kyma, ReconcileRecord, ReconcileState
from fleet.queue import LeaseBusy, NoBusySlot, StoredChange, TooSoon
from fleet.queue import lease as lease_module
from fleet.queue import requests as queue_requests
from fleet.queue.lease import KEEPER
from fleet.queue.marks import FULL, RedisFlags, flags
from fleet.services.modules import syncresource_save
from fleet.tasks import reconcile_due
from kernel.errors import QueueUnavailable
from reconciler.run import BUSY_RETRY, BUSY_RETRY_MAX, BUSY_SLOTS, busy_wait, kyma_reconcile_run
from reconciler.tasks import kyma_reconcile
from tests.factories import KymaFactory, SyncResourceFactory, beside

pytestmark = pytest.mark.django_db(transaction=True)


def test_given_no_pending_task_when_requested_twice_then_one_task(task_queue):
    kyma = KymaFactory()
    task_queue()
    assert queue.request([kyma.pk], reason="t") == [kyma.pk]
    assert queue.request([kyma.pk], reason="t") == []
    assert [t.args for t in task_queue()] == [[kyma.pk]]


def test_given_task_started_when_requested_again_then_a_new_task_follows(task_queue):
    kyma = KymaFactory()
    queue.request([kyma.pk], reason="t")
    task_queue()
    queue.started(kyma.pk)
    assert queue.request([kyma.pk], reason="after start") == [kyma.pk]
    assert len(task_queue()) == 1


def test_given_a_mark_whose_task_was_lost_when_its_ttl_passed_then_it_is_claimed_again(task_queue, settings):
    settings.RECONCILE_QUEUED_TTL = 1
    kyma = KymaFactory()
    assert queue.request([kyma.pk], reason="t") == [kyma.pk]
    task_queue()  # the task is lost
    assert queue.request([kyma.pk], reason="t") == []
    time.sleep(1.1)
    assert queue.request([kyma.pk], reason="t") == [kyma.pk]


def test_given_a_mark_whose_task_was_lost_when_beat_sweeps_then_its_reconcile_is_queued_again_once(
    task_queue,
):
    """The process that claimed the mark died before it published (or the worker holding the
    task died): events meanwhile were answered as covered. Beat's sweep finds the mark overdue
    while the queue is empty and queues the reconcile again, keeping what the mark says."""
    kyma = KymaFactory()
    task_queue()
    change = StoredChange("v1", "ConfigMap", "kyma-system", "c", "UPDATE", "u-1", "7").encode()
    long_ago = timezone.now() - dt.timedelta(seconds=50)
    assert flags().claim([kyma.pk], long_ago, long_ago, [change]) == [kyma.pk]  # its task: lost
    assert queue.requeue_overdue(after=30, limit=100) == [kyma.pk]
    [task] = task_queue()
    assert (task.name, task.args) == (queue.RECONCILE_TASK, [kyma.pk])
    assert queue.requeue_overdue(after=30, limit=100) == []  # the mark is fresh again: once
    assert task_queue() == []
    assert queue.start(kyma.pk).changes == (change,)


def test_given_a_reconcile_that_died_holding_its_lease_when_beat_sweeps_then_its_kyma_is_queued_again(
    task_queue,
):
    """A worker SIGKILLed mid-reconcile: its task had cleared the mark, the lease runs out
    unreleased. Beat's sweep takes it back and queues the Kyma again; a live lease is left alone."""
    dead, busy = KymaFactory(), KymaFactory()
    later = timezone.now() + dt.timedelta(minutes=5)
    beside(
        dead.pk,
        next_reconcile_at=later,
        lease_owner="host:999:1",
        lease_until=timezone.now() - dt.timedelta(seconds=1),
    )
    beside(busy.pk, next_reconcile_at=later)
    assert queue.lease_acquire(busy.pk, owner="host:123:1")
    task_queue()
    assert reconcile_due() == 1
    assert [(task.name, task.args) for task in task_queue()] == [(queue.RECONCILE_TASK, [dead.pk])]
    assert Kyma.objects.get(pk=dead.pk).lease_owner == ""
    assert Kyma.objects.get(pk=busy.pk).lease_owner == "host:123:1"
    assert reconcile_due() == 0  # taken back once


def test_given_a_backlog_in_the_queue_then_overdue_marks_wait_for_their_task(task_queue, monkeypatch):
    monkeypatch.setattr(queue_requests, "OVERDUE_BACKLOG", 2)  # (a backlog of 50 tasks, scaled down)
    late, *waiting = KymaFactory(), KymaFactory(), KymaFactory()
    task_queue()
    long_ago = timezone.now() - dt.timedelta(seconds=50)
    flags().claim([late.pk], long_ago, long_ago)
    queue.request([kyma.pk for kyma in waiting], reason="t")  # the workers are behind
    assert queue.requeue_overdue(after=30, limit=100) == []
    assert sorted(task.args[0] for task in task_queue()) == sorted(kyma.pk for kyma in waiting)


def test_given_broker_down_when_requested_then_error_and_claim_is_released(broker_down):
    kyma = KymaFactory(next_reconcile_at=timezone.now() + dt.timedelta(minutes=5))
    with pytest.raises(QueueUnavailable):
        queue.request([kyma.pk], reason="t")
    assert queue.queued([kyma.pk]) == set()
    # requests that coalesced into the failed claim were answered: the sweep picks the Kyma up
    assert Kyma.objects.get(pk=kyma.pk).next_reconcile_at <= timezone.now()


def test_given_request_inside_transaction_when_rolled_back_then_nothing_is_queued(task_queue):
    kyma = KymaFactory()
    task_queue()
    with transaction.atomic():
        queue.request([kyma.pk], reason="t")
        transaction.set_rollback(True)
    assert task_queue() == []
    with transaction.atomic():
        queue.request([kyma.pk], reason="t")
    assert len(task_queue()) == 1


def test_given_many_kymas_when_requested_in_one_call_then_each_gets_one_task(task_queue):
    kymas = KymaFactory.create_batch(30)
    task_queue()
    claimed = queue.request([k.pk for k in kymas] * 2, reason="sweep")
    assert sorted(claimed) == sorted(k.pk for k in kymas)
    assert len(task_queue()) == 30


def test_given_held_lease_when_another_worker_tries_then_it_is_refused_until_released_or_expired():
    kyma = KymaFactory()
    assert queue.lease_acquire(kyma.pk, owner="a")
    assert not queue.lease_acquire(kyma.pk, owner="b")
    assert queue.lease_extend(kyma.pk, owner="a") and not queue.lease_extend(kyma.pk, owner="b")
    queue.lease_release(kyma.pk, owner="a")
    assert queue.lease_acquire(kyma.pk, owner="b")
    beside(kyma.pk, lease_until=timezone.now() - dt.timedelta(seconds=1))
    assert queue.lease_acquire(kyma.pk, owner="c")


def test_given_a_lease_taken_inside_a_transaction_then_its_holder_renews_it_and_the_keeper_leaves_it(
    settings, monkeypatch
):
    """The keeper thread's connection cannot see a row of an open transaction (a test's, a
    caller's atomic block): were it to renew that lease, it would find nothing and call it lost.
    Such a lease is renewed by its holder between steps, on the transaction's own connection."""
    settings.RECONCILE_LEASE_SECONDS = 0.4
    # This process's keeper, without the leases earlier tests left in it (its round would write
    # them, and on SQLite wait for this test's transaction until "database is locked").
    keeper_of_this_test = type(KEEPER)()
    monkeypatch.setattr(lease_module, "KEEPER", keeper_of_this_test)
    kyma = KymaFactory()
    with transaction.atomic():
        assert queue.lease_acquire(kyma.pk, owner="inline")
        heartbeat = queue.LeaseKeeper(kyma.pk, owner="inline")
        first = ReconcileState.objects.get(kyma_id=kyma.pk).lease_until
        keeper = threading.Thread(target=keeper_of_this_test.renew_now)  # its round, on its own connection
        keeper.start()
        keeper.join()
        assert heartbeat()
        time.sleep(0.25)  # past a third of the lease: the next step renews it
        assert heartbeat()
        assert ReconcileState.objects.get(kyma_id=kyma.pk).lease_until > first
        beside(kyma.pk, lease_owner="another")  # taken over: the holder's next renewal finds it gone
        time.sleep(0.25)
        assert not heartbeat()


def test_given_lease_busy_when_task_runs_then_it_rearms_the_flag_for_a_retry(task_queue):
    kyma = KymaFactory()
    queue.lease_acquire(kyma.pk, owner="someone-else")
    with pytest.raises(LeaseBusy):
        kyma_reconcile_run(kyma.pk)
    assert queue.queued([kyma.pk]) == {kyma.pk}
    task_queue()
    assert queue.request([kyma.pk], reason="coalesces into the retry") == []


def reconciled(kyma: Kyma, *seconds_ago: float) -> None:
    """Reconciles on record, newest first (the newest is the Kyma's last one)."""
    now = timezone.now()
    for ago in seconds_ago:
        started = now - dt.timedelta(seconds=ago)
        ReconcileRecord.objects.create(kyma_id=kyma.pk, started_at=started, duration_ms=1, state="Ready")
    beside(kyma.pk, last_reconcile_at=now - dt.timedelta(seconds=seconds_ago[0]))


def test_given_a_kyma_that_keeps_changing_when_task_runs_then_it_is_deferred_and_coalesces(task_queue):
    kyma = KymaFactory()
    reconciled(kyma, 0.3, 0.8)
    with pytest.raises(TooSoon) as deferred:
        kyma_reconcile_run(kyma.pk, min_spacing=1.0)
    assert 0.5 < deferred.value.retry_after <= 0.7
    assert queue.queued([kyma.pk]) == {kyma.pk}
    task_queue()
    assert queue.request([kyma.pk], reason="coalesces into the retry") == []
    assert not ReconcileState.objects.exclude(lease_owner="").exists()  # deferred before taking the lease


def test_given_a_first_change_after_a_quiet_period_then_the_spacing_does_not_hold_it_back():
    kyma = KymaFactory()
    reconciled(kyma, 0.3, 300)  # e.g. a periodic reconcile moments ago, the one before long ago
    kyma_reconcile_run(kyma.pk, min_spacing=1.0)
    assert ReconcileRecord.objects.filter(kyma_id=kyma.pk).count() == 3
    with pytest.raises(TooSoon):  # the next one within the spacing waits: two per two spacings
        kyma_reconcile_run(kyma.pk, min_spacing=1.0)


@pytest.mark.parametrize("last", [None, dt.timedelta(seconds=2)])
def test_given_no_recent_reconcile_when_task_runs_with_spacing_then_it_runs(last):
    kyma = KymaFactory(last_reconcile_at=timezone.now() - last if last else None)
    kyma_reconcile_run(kyma.pk, min_spacing=1.0)
    assert ReconcileRecord.objects.filter(kyma_id=kyma.pk).exists()


def test_given_a_task_already_queued_when_another_wants_to_retry_then_it_is_told_to_go():
    kyma = KymaFactory()
    assert queue.rearm(kyma.pk) is not None  # nothing queued: this retry holds the mark
    assert queue.rearm(kyma.pk) is None  # a second would only duplicate the work
    queue.started(kyma.pk)
    assert queue.rearm(kyma.pk) is not None


def test_given_deleted_kyma_when_task_runs_then_it_returns_quietly():
    kyma_reconcile_run(987654)


def test_given_an_event_just_before_the_queued_task_is_due_then_the_task_learns_when_it_may_read(task_queue):
    kyma = KymaFactory()
    queued, eta = queue.request_one(kyma.pk, countdown=0, margin=0)
    assert queued is True
    asked_at = timezone.now()
    queued, covering = queue.request_one(kyma.pk, countdown=0.1, margin=0.3)
    # coalesced into the task due now, which will not read before the margin is past...
    assert queued is False and covering >= asked_at + dt.timedelta(seconds=0.3) > eta
    not_before = queue.started(kyma.pk)
    assert not_before is not None and not_before >= asked_at + dt.timedelta(seconds=0.3)  # ...which waits
    assert queue.started(kyma.pk) is None  # the mark is gone with its start
    assert len(task_queue()) == 1


def test_given_an_event_well_before_the_queued_task_is_due_then_no_wait_is_asked(task_queue):
    kyma = KymaFactory()
    queue.request_one(kyma.pk, countdown=5, margin=0.05)
    queued, eta = queue.request_one(kyma.pk, countdown=5, margin=0.05)
    assert queued is False and eta > timezone.now() + dt.timedelta(seconds=4)
    assert queue.started(kyma.pk) is None


def test_given_later_events_then_the_latest_need_wins_and_an_earlier_one_never_lowers_it(task_queue):
    kyma = KymaFactory()
    queue.request_one(kyma.pk, countdown=0, margin=0)
    before = timezone.now()
    queue.request_one(kyma.pk, countdown=0, margin=0.6)
    queue.request_one(kyma.pk, countdown=0, margin=0.2)
    assert queue.started(kyma.pk) >= before + dt.timedelta(seconds=0.6)


def test_given_a_task_told_to_wait_when_it_runs_then_it_reads_no_earlier(task_queue):
    kyma = KymaFactory()
    queue.request_one(kyma.pk, countdown=0, margin=0)
    asked_at = timezone.now()
    queue.request_one(kyma.pk, countdown=0, margin=0.3)
    kyma_reconcile_run(kyma.pk)
    record = ReconcileRecord.objects.get(kyma_id=kyma.pk)
    assert record.started_at >= asked_at + dt.timedelta(seconds=0.3)


def test_given_a_deferred_task_then_its_retry_keeps_the_wait(task_queue, settings):
    settings.LISTENER_CLOCK_SKEW = 0
    kyma = KymaFactory()
    reconciled(kyma, 0, 0.5)
    began = time.monotonic()
    queue.request_one(kyma.pk, countdown=0, margin=0)
    queue.request_one(kyma.pk, countdown=0, margin=1.9)  # not before 1.9 s from now
    with pytest.raises(TooSoon) as deferred:
        kyma_reconcile_run(kyma.pk, min_spacing=1.5)  # the spacing alone would wait < 1.5 s
    # (measured against the time this took: a starved test process must not fail it)
    assert deferred.value.retry_after >= 1.9 - (time.monotonic() - began) - 0.05
    assert queue.queued([kyma.pk]) == {kyma.pk}


def test_given_a_raised_mark_when_its_claim_is_released_then_it_is_gone(task_queue):
    kyma = KymaFactory()
    _, eta = queue.request_one(kyma.pk, countdown=0, margin=0)
    queue.request_one(kyma.pk, countdown=0, margin=0.3)  # raises "not before"
    flags().release([kyma.pk], eta)  # what a failed publish of the claim does
    assert queue.queued([kyma.pk]) == set()


def test_given_a_mark_due_within_the_clock_skew_of_an_event_then_the_wait_is_recorded(task_queue, settings):
    settings.LISTENER_CLOCK_SKEW = 0.5
    kyma = KymaFactory()
    queue.request_one(kyma.pk, countdown=0.4, margin=0)  # due 0.4 s from now
    # 0.3 s would be before that ETA, but the host that set it may run up to 0.5 s ahead
    queue.request_one(kyma.pk, countdown=0.4, margin=0.3)
    assert queue.started(kyma.pk) is not None


def test_given_a_mark_near_its_expiry_when_a_wait_is_recorded_then_the_mark_outlives_it(task_queue, settings):
    settings.RECONCILE_QUEUED_TTL = 1
    kyma = KymaFactory()
    now = timezone.now()
    flags().claim([kyma.pk], now, now - dt.timedelta(seconds=0.5))  # an overdue task
    asked_at = timezone.now()
    queue.request_one(kyma.pk, countdown=0, margin=0.3)
    time.sleep(1.1)  # past the mark's own expiry, not past the wait it asks for
    assert queue.started(kyma.pk) >= asked_at + dt.timedelta(seconds=0.3)


def test_given_nothing_queued_when_the_control_plane_asks_then_one_marked_urgent_task(task_queue):
    kyma = KymaFactory()
    task_queue()
    assert queue.request([kyma.pk], reason="spec changed", urgent=True) == [kyma.pk]
    assert queue.request([kyma.pk], reason="watch-event") == []  # a runtime event coalesces into it
    assert [t.kwargs for t in task_queue()] == [{"reason": "spec changed", "urgent": True, "marked": True}]


def test_given_a_runtime_task_queued_when_the_control_plane_asks_then_an_unmarked_task_runs_too(task_queue):
    kyma = KymaFactory()
    queue.request([kyma.pk], reason="watch-event", countdown=30)  # e.g. deferred by the spacing
    task_queue()
    assert queue.request([kyma.pk], reason="sync resource s changed", urgent=True) == [kyma.pk]
    assert queue.request([kyma.pk], reason="module status reported", urgent=True) == []  # joins it
    assert [t.kwargs for t in task_queue()] == [
        {"reason": "sync resource s changed", "urgent": True, "marked": False}
    ]
    kyma_reconcile_run(kyma.pk, min_spacing=1.0, reason="sync resource s changed", urgent=True, marked=False)
    assert queue.queued([kyma.pk]) == {kyma.pk}  # the mark stays with the queued task
    assert queue.request([kyma.pk], reason="watch-event") == []


def test_given_a_sync_resource_written_right_after_a_reconcile_then_its_reconcile_is_not_spaced(task_queue):
    resource = SyncResourceFactory()
    kyma = resource.kyma
    # (seconds, not tenths: on a loaded machine the reconcile itself may take more than a second)
    reconciled(kyma, 1, 15)  # a runtime that keeps changing: a runtime event would wait
    task_queue()
    resource.manifests = resource.manifests + "\n# edited\n"
    assert syncresource_save(resource)
    (task,) = task_queue()
    assert task.kwargs["urgent"] is True
    kyma_reconcile_run(kyma.pk, min_spacing=10, **task.kwargs)  # no TooSoon
    newest = ReconcileRecord.objects.filter(kyma_id=kyma.pk).order_by("-started_at").first()
    assert newest.reason == f"sync resource {resource.name} changed"
    with pytest.raises(TooSoon):  # the runtime's next event still waits for the spacing
        kyma_reconcile_run(kyma.pk, min_spacing=10, reason="watch-event")
    with pytest.raises(TooSoon):  # and so does a third within the spacing, even the control plane's
        kyma_reconcile_run(kyma.pk, min_spacing=10, reason="module status reported", urgent=True)


def test_given_lease_busy_when_the_task_runs_then_it_is_published_again_and_ends(task_queue):
    """Not a Celery retry (an error to Celery, costly under a storm): the same task, queued anew."""
    kyma = KymaFactory()
    queue.request([kyma.pk], reason="watch-event")
    queue.lease_acquire(kyma.pk, owner="someone-else")
    task_queue()
    assert kyma_reconcile(kyma.pk, reason="watch-event", urgent=True, marked=True, busy=2) is None
    [again] = task_queue()
    assert (again.name, again.args) == ("controlplane.kyma_reconcile", [kyma.pk])
    assert again.kwargs == {"reason": "watch-event", "urgent": True, "marked": True, "busy": 2}


def test_given_an_urgent_task_whose_mark_another_holds_when_the_lease_is_busy_then_it_retries_unmarked(
    task_queue,
):
    kyma = KymaFactory()
    queue.request([kyma.pk], reason="watch-event", countdown=30)
    queue.lease_acquire(kyma.pk, owner="someone-else")
    with pytest.raises(LeaseBusy) as busy:
        kyma_reconcile_run(kyma.pk, reason="spec changed", urgent=True, marked=False)
    assert busy.value.marked is False
    assert queue.queued([kyma.pk]) == {kyma.pk}


def test_given_a_kyma_that_keeps_changing_when_an_event_follows_then_its_task_is_due_after_the_spacing(
    task_queue,
):
    kyma = KymaFactory()
    reconciled(kyma, 1.2, 1.9)  # not after a quiet period: the next reconcile is spaced
    kyma_reconcile_run(kyma.pk, min_spacing=1.0)
    last = Kyma.objects.get(pk=kyma.pk).last_reconcile_at
    task_queue()
    queued, eta = queue.request_one(kyma.pk, countdown=0)
    assert queued
    assert eta >= last + dt.timedelta(seconds=1.0)  # published due then: it will not be too soon
    queue.started(kyma.pk)
    assert queue.rearm(kyma.pk, 0.1) >= (last + dt.timedelta(seconds=1.0) - timezone.now()).total_seconds()


def test_given_a_reconcile_after_a_quiet_period_when_an_event_follows_then_its_task_is_due_at_once(
    task_queue,
):
    kyma = KymaFactory()
    reconciled(kyma, 300)
    kyma_reconcile_run(kyma.pk, min_spacing=1.0)
    queued, eta = queue.request_one(kyma.pk, countdown=0)
    assert queued
    assert eta <= timezone.now()  # two per two spacings: the next one may run at once


def test_given_the_mark_stores_connection_dropped_when_events_follow_then_the_next_one_claims(task_queue):
    """The listener's claims keep a connection of their own (Redis), or use the thread's database
    connection: when the server drops it, at most that one claim fails, as QueueUnavailable (the
    watcher is answered 503 and retries), and the next one connects again and queues the task."""
    from django.db import connection

    from fleet.queue.marks import RedisFlags

    kyma = KymaFactory()
    store = flags()
    assert queue.request_one(kyma.pk, countdown=0)[0]
    task_queue()
    queue.started(kyma.pk)
    if isinstance(store, RedisFlags):
        mine = store._connection()  # the one the claim above used
        mine.send_command("CLIENT", "ID")
        store.client.execute_command("CLIENT", "KILL", "ID", mine.read_response())
    else:
        connection.close()
    outcomes = []
    for _ in range(2):
        try:
            outcomes.append(queue.request_one(kyma.pk, countdown=0)[0])
        except QueueUnavailable:
            outcomes.append("unavailable")
        if outcomes[-1] is True:
            break
    assert outcomes[-1] is True, outcomes
    assert [t.args for t in task_queue()] == [[kyma.pk]]


def test_given_a_status_report_that_only_moves_observed_revision_then_it_is_stored_and_reconciles_nothing(
    task_queue,
):
    from fleet.services.modules import moduleconfig_set_status, moduleconfig_upsert
    from tests.factories import ModuleFactory

    kyma = KymaFactory()
    config, _ = moduleconfig_upsert(
        kyma=kyma,
        module=ModuleFactory(),
        spec={"replicas": 1},
        source_generation=1,
        source_resource_version="1",
    )
    task_queue()
    assert moduleconfig_set_status(
        config=config, status={"state": "Ready", "message": "", "observedRevision": 1}
    )
    assert [t.args for t in task_queue()] == [[kyma.pk]]  # the Kyma shows the new state
    queue.started(kyma.pk)
    queue.start_urgent(kyma.pk)
    before = type(config).objects.get(pk=config.pk).revision

    assert moduleconfig_set_status(
        config=config, status={"state": "Ready", "message": "", "observedRevision": 2}
    )
    stored = type(config).objects.get(pk=config.pk)
    assert stored.status["observedRevision"] == 2 and stored.revision > before  # streamed to watchers
    assert task_queue() == []

    assert moduleconfig_set_status(
        config=config, status={"state": "Error", "message": "x", "observedRevision": 2}
    )
    assert [t.args for t in task_queue()] == [[kyma.pk]]


def keeps_changing(kyma: Kyma) -> None:
    """A runtime that keeps changing: its reconcile just ran, and the one before moments earlier
    (not after a quiet period), so the next one is spaced."""
    reconciled(kyma, 1.2, 1.9)
    kyma_reconcile_run(kyma.pk, min_spacing=1.0)


def test_given_a_runtime_that_keeps_changing_then_its_tasks_are_busy_and_a_quiet_ones_are_not(task_queue):
    hot, quiet = KymaFactory(), KymaFactory()
    keeps_changing(hot)
    reconciled(quiet, 300)
    kyma_reconcile_run(quiet.pk, min_spacing=1.0)
    task_queue()
    assert queue.request_one(hot.pk, countdown=0)[0]  # an event: published due after the spacing
    assert queue.request_one(quiet.pk, countdown=0)[0]  # due at once
    assert [(t.args[0], t.kwargs.get("busy", False)) for t in task_queue()] == [
        (hot.pk, True),
        (quiet.pk, False),
    ]
    queue.started(hot.pk)
    queue.started(quiet.pk)
    # The control plane's changes for them (a manager answering each event) follow suit.
    assert queue.request([hot.pk, quiet.pk], reason="sync resource s changed", urgent=True)
    assert {t.args[0]: t.kwargs.get("busy", 0) for t in task_queue()} == {hot.pk: 1, quiet.pk: 0}


def test_given_the_busy_slots_taken_when_a_busy_task_runs_then_it_waits_with_its_changes_and_quiet_ones_run(
    task_queue, settings
):
    settings.RECONCILE_BUSY_SLOTS = 1
    hot, quiet = KymaFactory(), KymaFactory()
    change = StoredChange("v1", "ConfigMap", "kyma-system", "settings", "UPDATE", "uid-1", "41")
    task_queue()
    queue.request_one(hot.pk, countdown=0, change=change)
    assert BUSY_SLOTS.take()  # another busy reconcile of this process holds the only slot
    try:
        with pytest.raises(NoBusySlot) as deferred:
            kyma_reconcile_run(hot.pk, reason="watch-event", busy=1)
        assert deferred.value.retry_after >= BUSY_RETRY
        assert queue.request_one(hot.pk, countdown=0)[0] is False  # events meanwhile join the retry
        assert not ReconcileRecord.objects.filter(kyma_id=hot.pk).exists()
        kyma_reconcile_run(quiet.pk, reason="watch-event")  # a quiet runtime's task is not held back
        assert ReconcileRecord.objects.filter(kyma_id=quiet.pk).count() == 1
        # An unmarked control-plane task of a busy runtime waits the same way.
        assert queue.request([hot.pk], reason="sync resource s changed", urgent=True) == [hot.pk]
        with pytest.raises(NoBusySlot) as unmarked:
            kyma_reconcile_run(hot.pk, reason="sync resource s changed", urgent=True, marked=False, busy=1)
        assert unmarked.value.marked is False
    finally:
        BUSY_SLOTS.give_back()
    # The retry still checks the change; the event that said none makes it read everything.
    assert queue.start(hot.pk).changes == (change.encode(), FULL)
    queue.rearm(hot.pk)
    kyma_reconcile_run(hot.pk, reason="watch-event", busy=3)  # a slot is free again
    assert ReconcileRecord.objects.filter(kyma_id=hot.pk).count() == 1


def test_a_busy_task_tries_for_a_slot_after_its_spacing_then_ever_later_up_to_a_bound():
    waits = [busy_wait(1.0, tries) for tries in range(1, 8)]
    assert waits[:3] == [1.0, 2.0, 4.0]
    assert max(waits) == BUSY_RETRY_MAX
    assert busy_wait(0.0, 1) == BUSY_RETRY  # no spacing: still not at once


def test_given_events_that_find_a_task_queued_then_with_redis_marks_the_runtime_counts_as_busy(task_queue):
    """The runtime changes again before its reconcile ran: it keeps changing. (The database's
    marks only know that a reconcile of it was spaced lately.)"""
    kyma = KymaFactory()
    task_queue()
    assert queue.request_one(kyma.pk, countdown=0)[0]
    assert queue.request_one(kyma.pk, countdown=0)[0] is False  # coalesces into the queued task
    (event,) = task_queue()
    assert "busy" not in event.kwargs  # the first event found nothing queued
    queue.started(kyma.pk)
    queue.request([kyma.pk], reason="sync resource s changed", urgent=True)
    (answer,) = task_queue()
    assert answer.kwargs.get("busy", 0) == (1 if isinstance(flags(), RedisFlags) else 0)
