"""Every role that talks to the database in a loop, through a real cut: a PostgreSQL of the test's
own, stopped for a few seconds and started again (sessions are cut, connections refused).

Each role logs the outage once, then one line per retry with a growing delay, and one line when
the database answers again; never a traceback per attempt. A leading beat stops leading at its
first failed renewal (it can no longer fence its claims) and leads again once the database is back.
The lines are counted: before, a leading beat logged 1,055 tracebacks in a 20 s cut.
"""

from __future__ import annotations

import re
import ssl
import sys
import time
from pathlib import Path

import psycopg
import pytest

from tests.support.listener import request
from tests.support.processes import Process, free_port, manage_command, process_env, start_worker, wait_port
from tests.support.services import OwnPostgres, OwnRedis

pytestmark = pytest.mark.integration

OUTAGE = 8.0  # seconds without the database
RETRY = re.compile(r"(?:retrying|next try) in ([0-9.]+) s")

KYMA = """\
apiVersion: operator.kyma-project.io/v1beta2
kind: Kyma
metadata:
  name: outage
  namespace: kcp-system
  labels: {kyma-project.io/runtime-id: rt-outage}
  annotations: {skr-domain: outage.kyma.example.com}
spec: {channel: regular, modules: []}
"""


def env_for(postgres: OwnPostgres, **extra: str) -> dict:
    return process_env(DATABASE_URL=postgres.url, DATABASE_CONN_MAX_AGE="60", **extra)


def cut(postgres: OwnPostgres, during=lambda: None) -> None:
    """The database goes away for ``OUTAGE`` seconds (``during`` is called meanwhile, now and then)."""
    postgres.stop()
    ends = time.monotonic() + OUTAGE
    while time.monotonic() < ends:
        during()
        time.sleep(0.1)
    postgres.start()


def outage_lines(lines: list[str]) -> list[str]:
    return [line for line in lines if "the database is" in line or "the database answers" in line]


def assert_logged_once_then_per_retry(lines: list[str], what: str) -> list[float]:
    """The outage's lines of ``what``: one saying it went, then one per retry with delays that grow
    (never shrink), then one saying it is back; no traceback anywhere. Returns the delays."""
    assert not [line for line in lines if "Traceback" in line], "\n".join(lines)
    mine = [line for line in outage_lines(lines) if f"{what}: the database" in line]
    assert len([line for line in mine if "the database is unreachable" in line]) == 1, "\n".join(mine)
    assert "the database is unreachable" in mine[0], "\n".join(mine)
    assert "answers again" in mine[-1], "\n".join(mine)
    delays = [float(found.group(1)) for line in mine if (found := RETRY.search(line))]
    assert delays == sorted(delays) and delays[-1] > delays[0], "\n".join(mine)
    # A growing delay: over OUTAGE seconds, far fewer tries than a fixed short interval would make.
    assert len(mine) <= 2 + len(delays) <= 10, "\n".join(mine)
    return delays


def test_given_a_leading_beat_when_the_database_is_cut_then_it_stands_down_logs_per_retry_and_leads_again(
    postgres,
):
    manage_command(env_for(postgres), "migrate", "--noinput", "-v0")
    beat = Process(
        "beat",
        [sys.executable, "-m", "celery", "-A", "controlplane", "beat", "--loglevel", "INFO"],
        env_for(postgres, BEAT_LEASE_SECONDS="3", BEAT_STANDBY_POLL="0.5", RECONCILE_SWEEP_INTERVAL="1"),
        keep=100_000,
    )
    try:
        beat.wait_for(lambda: "beat: leading since" in beat.output(), 60, "the beat leads")
        before = len(beat.lines)
        postgres.stop()
        cut_at = time.monotonic()
        beat.wait_for(lambda: "beat: lost the lease" in beat.output(), OUTAGE, "the beat standing down")
        stood_down = time.monotonic() - cut_at
        time.sleep(max(0.0, OUTAGE - stood_down))
        postgres.start()
        beat.wait_for(lambda: "answers again" in beat.output(), 30, "the beat reaching the database")
        beat.wait_for(lambda: beat.output().count("beat: leading since") >= 2, 15, "the beat leading again")
        lines = list(beat.lines)[before:]
    finally:
        beat.stop()
    # It stood down within a renewal (a quarter of the lease) and a try, not when its lease ran out.
    assert stood_down < 3 / 4 + 1, stood_down
    assert not [line for line in lines if "Database gave error" in line], "\n".join(lines)
    assert [line for line in lines if "beat: lost the lease" in line] == [
        line for line in lines if "lost the lease" in line
    ] and len([line for line in lines if "lost the lease" in line]) == 1, "\n".join(lines)
    delays = assert_logged_once_then_per_retry(lines, "beat")
    assert max(delays) <= 3, delays  # never longer than the lease: a standby may be waiting


def test_given_a_worker_when_the_database_is_cut_then_tasks_that_meet_it_log_one_line_each(postgres):
    env = env_for(postgres)
    manage_command(env, "migrate", "--noinput", "-v0")
    manage_command(env, "apply", "-f", "-", stdin=KYMA)
    with psycopg.connect(postgres.url.replace("postgres://", "postgresql://"), connect_timeout=3) as conn:
        kyma = conn.execute("SELECT id FROM controlplane_kyma WHERE name = 'outage'").fetchone()[0]
    worker = start_worker(concurrency=2, DATABASE_URL=postgres.url, DATABASE_CONN_MAX_AGE="60")
    worker.lines = type(worker.lines)(worker.lines, maxlen=100_000)
    from controlplane.celery import app

    try:
        # The reconcile the apply asked for runs first: the cut then meets one reconcile of the
        # Kyma, whose retries make one series (two at once would interleave theirs).
        worker.wait_for(
            lambda: "reconciled kcp-system/outage" in worker.output(), 60, "the apply's reconcile"
        )
        before = len(worker.lines)

        def tasks() -> None:  # what beat and the listener keep sending: each meets the outage
            app.send_task("controlplane.reconcile_due")
            app.send_task("listener.housekeeping")

        app.send_task("controlplane.kyma_reconcile", args=[kyma], kwargs={"reason": "during the outage"})
        cut(postgres, during=lambda: tasks() if int(time.monotonic() * 10) % 10 == 0 else None)
        worker.wait_for(lambda: "reconcile of Kyma" in worker.output(), 30, "the reconcile's retries")
        time.sleep(2)
        lines = list(worker.lines)[before:]
    finally:
        worker.stop()
    assert not [line for line in lines if "Traceback" in line or line.startswith("  File ")], "\n".join(lines)
    failed = [line for line in lines if "database unavailable" in line]
    assert failed, "\n".join(lines)
    # The reconcile that met the outage retried with a growing delay, one line per try.
    retries = [
        int(n)
        for n in re.findall(
            rf"reconcile of Kyma {kyma}: database unavailable.*?retrying in (\d+) s", "\n".join(lines), re.S
        )
    ]
    assert retries and retries == sorted(retries) and retries[-1] > retries[0], "\n".join(lines)


def test_given_a_listener_when_the_database_is_cut_then_its_event_records_wait_and_are_written_after(
    postgres, tmp_path: Path
):
    env = env_for(postgres)
    manage_command(env, "migrate", "--noinput", "-v0")
    manage_command(env, "pki", "bootstrap")
    manage_command(env, "apply", "-f", "-", stdin=KYMA)
    manage_command(env, "pki", "issue", "kcp-system/outage", "--out", str(tmp_path / "creds"))
    context = ssl.create_default_context(cafile=str(tmp_path / "creds" / "ca.crt"))
    context.load_cert_chain(str(tmp_path / "creds" / "tls.crt"), str(tmp_path / "creds" / "tls.key"))
    context.check_hostname = False
    port, metrics_port = free_port(), free_port()
    # The queue's marks and tasks in a Redis of the test's own: an event needs no database then (on
    # the database's marks it is answered 503 during the cut, as it must be).
    broker = OwnRedis(tmp_path / "redis").start()
    listener = Process(
        "listener",
        [sys.executable, "manage.py", "serve", "listener", "--bind", f"127.0.0.1:{port}"],
        env_for(
            postgres,
            LISTENER_METRICS_BIND=f"127.0.0.1:{metrics_port}",
            LISTENER_WORKERS="1",
            # Requests are answered from what the listener knows: the recorder alone needs the database.
            LISTENER_CACHE_SECONDS="3600",
            LISTENER_TLS_REFRESH="3600",
            CELERY_BROKER_URL=broker.url,
        ),
        keep=100_000,
    )
    path = "/v2/lifecycle-manager/event"
    body = {
        "watched": {"Namespace": "kyma-system", "Name": "default"},
        "watchedGvk": {"group": "operator.kyma-project.io", "version": "v1beta2", "kind": "Kyma"},
    }
    try:
        wait_port(port, proc=listener)

        def answered() -> bool:  # the port opens before the worker serves (a busy machine: seconds)
            try:
                return request(port, context, path, body)[0] == 200
            except OSError:
                return False

        listener.wait_for(answered, 60, "the listener answering an event")
        before = len(listener.lines)
        sent = []
        cut(postgres, during=lambda: sent.append(request(port, context, path, body)[0]))
        listener.wait_for(lambda: "answers again" in listener.output(), 30, "the records written again")
        lines = list(listener.lines)[before:]
        with psycopg.connect(postgres.url.replace("postgres://", "postgresql://"), connect_timeout=3) as conn:
            recorded = conn.execute(
                "SELECT coalesce(sum(count), 0) FROM listener_watcheventrecord"
            ).fetchone()[0]
    finally:
        listener.stop()
        broker.stop()
    assert set(sent) == {200}, sent  # the events themselves were queued all along
    assert_logged_once_then_per_retry(lines, "event records")
    assert recorded >= 1 + len(sent), (recorded, len(sent))  # nothing of what was kept was lost
