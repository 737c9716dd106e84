"""Beat, elected: the lease (controlplane.leases) and the scheduler that claims each tick once.

Time is moved by writing the lease's and the schedule's stored times, never by sleeping: a lease
"runs out" when its ``expires_at`` is put in the past, an entry "is due" when its ``last_run_at``
is an interval back.
"""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone
from django_celery_beat.models import PeriodicTask
from prometheus_client.parser import text_string_to_metric_families

from controlplane import leases
from controlplane.beat import LEASE_NAME, ElectedScheduler
from controlplane.celery import app
from controlplane.models import Lease

pytestmark = pytest.mark.django_db

SWEEP = "reconcile-due"


def run_out(name: str = LEASE_NAME) -> None:
    """The holder stopped renewing (SIGKILL, paused, cut off) and the lease's time is over."""
    Lease.objects.filter(name=name).update(expires_at=timezone.now() - dt.timedelta(seconds=1))


def test_given_a_free_lease_when_two_processes_ask_then_one_holds_it_and_the_other_is_refused():
    first = leases.lease_acquire(name="job", holder="host-a:1", seconds=10)
    second = leases.lease_acquire(name="job", holder="host-b:2", seconds=10)
    assert first is not None and first.term == 1 and first.valid()
    assert second is None
    assert leases.lease_current("job").holder == "host-a:1"


def test_given_the_holder_stopped_renewing_when_its_lease_ran_out_then_a_new_term_fences_it_off():
    old = leases.lease_acquire(name="job", holder="host-a:1", seconds=10)
    run_out("job")
    new = leases.lease_acquire(name="job", holder="host-b:2", seconds=10)
    assert new is not None and new.term == old.term + 1
    # The old holder still believes it holds the lease (its own clock): the database says no.
    assert old.valid()
    assert leases.lease_renew(old) is None
    done = []
    with pytest.raises(leases.LeaseLost), leases.lease_fenced(old):
        done.append("work that must happen once")
    assert done == []
    with leases.lease_fenced(new) as renewed:
        done.append("the new holder's work")
    assert done == ["the new holder's work"] and renewed.term == new.term


def test_given_a_holder_that_releases_its_lease_then_a_standby_takes_it_at_once():
    held = leases.lease_acquire(name="job", holder="host-a:1", seconds=60)
    assert leases.lease_release(held)
    taken = leases.lease_acquire(name="job", holder="host-b:2", seconds=60)
    assert taken is not None and taken.term == held.term + 1


# The scheduler commits and checks its connection as beat does (django-celery-beat): real transactions.
scheduler_test = pytest.mark.django_db(transaction=True)


def scheduler(holder: str) -> ElectedScheduler:
    beat = ElectedScheduler(app=app)
    beat.election.holder = holder
    return beat


def make_due(name: str = SWEEP) -> None:
    PeriodicTask.objects.filter(name=name).update(last_run_at=timezone.now() - dt.timedelta(hours=1))


def tick_until_sent(beat: ElectedScheduler, task_queue, name: str = SWEEP, ticks: int = 50) -> list:
    """Tick (without sleeping) until the beat sent ``name`` once; returns what was queued."""
    sent = []
    for _ in range(ticks):
        beat.tick()
        sent += [task for task in task_queue() if task.headers.get("periodic_task_name") == name]
        if sent:
            return sent
    return sent


@scheduler_test
def test_given_two_beats_then_only_the_one_holding_the_lease_sends(task_queue):
    first, second = scheduler("beat-a:1"), scheduler("beat-b:2")
    make_due()
    sent = tick_until_sent(first, task_queue)
    for _ in range(20):
        second.tick()
    assert [task.headers["beat_holder"] for task in sent] == ["beat-a:1"]
    assert [task.name for task in sent] == ["controlplane.reconcile_due"]
    assert second.election.leading() is False
    assert not [task for task in task_queue() if task.headers.get("beat_holder") == "beat-b:2"]


@scheduler_test
def test_given_a_leader_that_stopped_then_the_standby_takes_over_and_sends_the_next_tick_once(task_queue):
    first, second = scheduler("beat-a:1"), scheduler("beat-b:2")
    make_due()
    [sent_first] = tick_until_sent(first, task_queue)
    first.close()  # SIGTERM: the lease is released for the standby
    make_due()  # an interval passes
    [sent_second] = tick_until_sent(second, task_queue)
    assert sent_second.headers["beat_holder"] == "beat-b:2"
    assert sent_second.headers["beat_term"] == sent_first.headers["beat_term"] + 1
    assert sent_second.headers["beat_run_at"] != sent_first.headers["beat_run_at"]
    for _ in range(20):  # not due again within its interval: nothing more is sent
        second.tick()
    assert not [task for task in task_queue() if task.headers.get("periodic_task_name") == SWEEP]


@scheduler_test
def test_given_a_leader_paused_past_its_lease_when_it_resumes_then_its_claims_fail_and_it_sends_nothing(
    task_queue,
):
    stale, standby = scheduler("beat-a:1"), scheduler("beat-b:2")
    make_due()
    assert tick_until_sent(stale, task_queue)
    run_out()  # the leader was frozen (SIGSTOP, a long GC pause) beyond its lease
    make_due()
    [taken_over] = tick_until_sent(standby, task_queue)
    # The frozen leader resumes believing it still leads (its own clock did not see the pause) and
    # its entry of the sweep is due by what it remembers: its claim is fenced off.
    stale.election.held = stale.election.held.__class__(
        **{**stale.election.held.__dict__, "valid_until": float("inf")}
    )
    entry = stale._schedule[SWEEP]
    stale.reserve(entry)
    stale.apply_entry(entry, producer=stale.producer)
    assert stale.election.held is None
    assert not [task for task in task_queue() if task.headers.get("beat_holder") == "beat-a:1"]
    assert taken_over.headers["beat_term"] == leases.lease_current(LEASE_NAME).term


@scheduler_test
def test_given_a_stale_entry_of_the_leader_then_its_tick_is_not_sent_twice(task_queue):
    """A schedule reloaded from rows another claim moved since (the leader's own older entry
    object, as a heap rebuilt after a schedule change holds): the claim fails, nothing is sent."""
    beat = scheduler("beat-a:1")
    make_due()
    assert tick_until_sent(beat, task_queue)
    old_entry = beat.Entry(PeriodicTask.objects.get(name=SWEEP), app=app)
    make_due()  # the row moves on (another claim), the old entry object still says what it read
    PeriodicTask.objects.filter(name=SWEEP).update(total_run_count=99)
    claimed_before = PeriodicTask.objects.get(name=SWEEP).last_run_at
    old_entry.stored = claimed_before - dt.timedelta(seconds=5)
    beat.reserve(old_entry)
    beat.apply_entry(old_entry, producer=beat.producer)
    assert not [task for task in task_queue() if task.headers.get("periodic_task_name") == SWEEP]
    assert PeriodicTask.objects.get(name=SWEEP).last_run_at == claimed_before


def samples(client) -> dict[tuple, float]:
    """The web role's /metrics as {(name, labels...): value}."""
    found = {}
    for family in text_string_to_metric_families(client.get("/metrics").content.decode()):
        for sample in family.samples:
            found[(sample.name, *sorted(sample.labels.items()))] = sample.value
    return found


def test_given_a_beat_leads_then_the_web_metrics_say_who_and_since_when(client):
    held = leases.lease_acquire(name=LEASE_NAME, holder="beat-7f9c:12", seconds=10)
    found = samples(client)
    assert found[("controlplane_beat_leader_up",)] == 1
    since = ("controlplane_beat_leader_since_timestamp_seconds", ("holder", "beat-7f9c:12"))
    assert found[since] == pytest.approx(held.acquired_at.timestamp())
    run_out()
    found = samples(client)
    assert found[("controlplane_beat_leader_up",)] == 0
    assert since not in found
