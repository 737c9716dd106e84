"""A worker through a database outage: a PostgreSQL of the test's own, stopped and started again.

The worker keeps running; the reconcile that met the outage retries every few seconds
(``reconciler.tasks.DATABASE_RETRY_MAX``) and runs soon after the database is back.
"""

from __future__ import annotations

import time

import psycopg
import pytest

from controlplane.celery import app
from tests.support.processes import manage_command, process_env, start_worker
from tests.support.services import OwnPostgres

pytestmark = pytest.mark.integration

KYMA = """\
apiVersion: operator.kyma-project.io/v1beta2
kind: Kyma
metadata: {name: outage, namespace: kcp-system}
spec: {channel: regular, modules: []}
"""


def records(url: str) -> int:
    with psycopg.connect(url.replace("postgres://", "postgresql://"), connect_timeout=3) as conn:
        return conn.execute("SELECT count(*) FROM controlplane_reconcilerecord").fetchone()[0]


def kyma_id(url: str) -> int:
    with psycopg.connect(url.replace("postgres://", "postgresql://"), connect_timeout=3) as conn:
        return conn.execute("SELECT id FROM controlplane_kyma WHERE name = 'outage'").fetchone()[0]


def test_given_a_worker_when_postgresql_stops_and_starts_then_it_lives_and_the_reconcile_runs_after(
    postgres, task_queue
):
    env = process_env(DATABASE_URL=postgres.url, DATABASE_CONN_MAX_AGE="60")
    manage_command(env, "migrate", "--noinput", "-v0")
    manage_command(
        env, "apply", "-f", "-", stdin=KYMA
    )  # no kubeconfig: its reconcile ends in Error, recorded
    worker = start_worker(concurrency=2, DATABASE_URL=postgres.url, DATABASE_CONN_MAX_AGE="60")
    try:
        pk = kyma_id(postgres.url)
        app.send_task("controlplane.kyma_reconcile", args=[pk], kwargs={"reason": "test"})
        worker.wait_for(lambda: records(postgres.url) >= 1, 60, "a first reconcile recorded")
        postgres.stop()
        app.send_task("controlplane.kyma_reconcile", args=[pk], kwargs={"reason": "during the outage"})
        worker.wait_for(lambda: "database unavailable" in worker.output(), 30, "the reconcile met the outage")
        before = records_after_start(postgres)
        back = time.monotonic()
        worker.wait_for(lambda: records(postgres.url) > before, 15, "the retried reconcile recorded")
        assert time.monotonic() - back < 15
        assert worker.proc.poll() is None
        assert "Unrecoverable error" not in worker.output()
    finally:
        worker.stop()


def records_after_start(postgres: OwnPostgres) -> int:
    postgres.start()
    return records(postgres.url)
