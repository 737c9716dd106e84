"""Two real ``celery beat`` processes: one sends, the other stands by and takes over when the
leader is killed, and no tick of the sweep is sent twice or skipped for longer than the takeover."""

from __future__ import annotations

import datetime as dt
import itertools
import signal
import time

import pytest
import redis as redis_client
import requests
from django.utils import timezone

from controlplane.beat import LEASE_NAME
from controlplane.leases import lease_current, lease_is_live
from tests.support.processes import free_port, start_beat
from tests.support.services import OwnRedis

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

LEASE, POLL, SWEEP_EVERY = 3.0, 0.5, 1.0
SWEEP = "reconcile-due"


def wait(condition, what: str, timeout: float, procs=()):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"{what} did not happen within {timeout} s\n" + "\n".join(p.output() for p in procs))


def leader() -> str | None:
    lease = lease_current(LEASE_NAME)
    return lease.holder if lease is not None and lease_is_live(lease, timezone.now()) else None


@pytest.fixture
def beats():
    started = []

    def start():
        port = free_port()
        proc = start_beat(
            BEAT_LEASE_SECONDS=str(LEASE),
            BEAT_STANDBY_POLL=str(POLL),
            RECONCILE_SWEEP_INTERVAL=str(SWEEP_EVERY),
            BEAT_METRICS_BIND=f"127.0.0.1:{port}",
        )
        proc.probe = f"http://127.0.0.1:{port}"
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.stop()


def sweeps(tasks) -> list:
    return [task for task in tasks if task.headers.get("periodic_task_name") == SWEEP]


def test_given_two_beats_when_the_leader_is_killed_then_the_standby_takes_over_and_no_tick_is_doubled(
    beats, task_queue
):
    first, second = beats(), beats()
    holder = wait(leader, "a beat leads", 20, (first, second))
    by_pid = {str(proc.proc.pid): proc for proc in (first, second)}
    leading = by_pid[holder.rpartition(":")[2]]
    standing_by = second if leading is first else first
    # Probes pass for the leader and the standby alike, and say which is which.
    for proc, role in ((leading, "leader"), (standing_by, "standby")):
        wait(lambda p=proc: requests.get(f"{p.probe}/readyz", timeout=5).status_code == 200, "ready", 10)
        ready = requests.get(f"{proc.probe}/readyz", timeout=5).json()
        assert ready["role"] == role, ready
        assert requests.get(f"{proc.probe}/healthz", timeout=5).status_code == 200
    metrics = requests.get(f"{leading.probe}/metrics", timeout=5).text
    assert f'controlplane_beat_leading{{holder="{holder}"}} 1.0' in metrics

    sent = wait(lambda: sweeps(task_queue()), "the leader's first sweep", 10, (leading,))
    leading.signal(signal.SIGKILL)  # the node goes away: no release, the lease must run out
    killed_at = time.monotonic()
    new_holder = wait(lambda: (h := leader()) and h != holder and h, "the standby leads", 15, (standing_by,))
    took = time.monotonic() - killed_at
    assert new_holder.endswith(f":{standing_by.proc.pid}")
    assert "beat: leading since" in wait(
        lambda: next((line for line in standing_by.lines if "leading since" in line), None),
        "the new leader's log line",
        5,
    )
    wait(lambda: requests.get(f"{standing_by.probe}/readyz", timeout=5).json()["role"] == "leader", "role", 5)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        sent += sweeps(task_queue())
        if sum(1 for task in sent if task.headers["beat_holder"] == new_holder) >= 2:
            break
        time.sleep(0.1)
    runs = sorted(dt.datetime.fromisoformat(task.headers["beat_run_at"]) for task in sent)
    assert len(runs) == len(set(runs)), "a tick was sent twice"
    gaps = [(later - earlier).total_seconds() for earlier, later in itertools.pairwise(runs)]
    assert all(gap >= SWEEP_EVERY - 0.05 for gap in gaps), gaps
    # Nothing skipped for longer than the takeover (the lease, a poll, then the sweep's interval).
    assert max(gaps) <= took + SWEEP_EVERY + 1.0, (gaps, took)
    assert leading.proc.wait(5) == -signal.SIGKILL


def test_given_a_leading_beat_when_the_broker_is_away_longer_than_the_lease_then_it_keeps_leading(tmp_path):
    """Sending waits for no broker: the loop goes on renewing the lease (before, the first send of
    an outage blocked it, the lease ran out and the leadership went round)."""
    broker = OwnRedis(tmp_path / "redis").start()
    beat = start_beat(
        BEAT_LEASE_SECONDS=str(LEASE),
        BEAT_STANDBY_POLL=str(POLL),
        RECONCILE_SWEEP_INTERVAL=str(SWEEP_EVERY),
        CELERY_BROKER_URL=broker.url,
    )
    try:
        holder = wait(leader, "the beat leads", 20, (beat,))
        term = lease_current(LEASE_NAME).term
        broker.stop()
        beat.wait_for(lambda: "the broker is unreachable" in beat.output(), 20, "a sweep meeting the outage")
        outage_ends = time.monotonic() + 2 * LEASE
        while time.monotonic() < outage_ends:  # the outage outlasts the lease twice over
            assert leader() == holder and lease_current(LEASE_NAME).term == term, beat.output()
            time.sleep(0.1)
        broker.start()
        sends = redis_client.Redis.from_url(broker.url)
        beat.wait_for(lambda: sends.llen("controlplane") > 0, 20, "sweeps queued after the outage")
        assert lease_current(LEASE_NAME).term == term
        assert beat.output().count("the broker is unreachable") == 1
    finally:
        beat.stop()
        broker.stop()
