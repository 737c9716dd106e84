"""The Kyma row keeps the Kyma: queue marks, leases, heartbeats and push bookkeeping live in rows of
their own (fleet.models.bookkeeping), so an operator's edit never waits on them, nor they on it.

On PostgreSQL the locks are real: one transaction holds the lease, the mark and the heartbeat rows
(or the Kyma row, as an operator's edit does) while another works with a ``lock_timeout``: a wait
would fail it. On every database, the statements of those hot writes are checked not to name the
Kyma table."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator

import pytest
from django.conf import settings
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from fleet import queue
from fleet.models import Kyma, ReconcileState, WatcherContact
from fleet.models.bookkeeping import ROWS
from fleet.queue.marks import DatabaseFlags
from fleet.services import kymas as kyma_services
from tests.factories import KymaFactory

KYMA_TABLE = Kyma._meta.db_table
# What the Kyma keeps: spec and status (at most 30 columns, issue 34).
MOST_COLUMNS = 30


def hot_writes(kyma_id: int) -> list[Callable[[], object]]:
    """The writes the machinery makes all the time: a mark claimed and cleared, a lease taken and
    given back with the schedule, a heartbeat."""
    marks = DatabaseFlags()
    now = timezone.now()
    return [
        lambda: marks.claim([kyma_id], now, now),
        lambda: marks.claim_one(kyma_id, now, now, now, ["change"]),
        lambda: marks.space(kyma_id, now),
        lambda: marks.started(kyma_id),
        lambda: queue.lease_acquire(kyma_id, owner="worker:1:1"),
        lambda: queue.reconcile_finished(
            kyma_id, owner="worker:1:1", ran_at=now, next_at=now, error_streak=0
        ),
        lambda: WatcherContact.objects.update_or_create(kyma_id=kyma_id, defaults={"last_seen_at": now}),
    ]


@pytest.mark.django_db
def test_the_kyma_table_keeps_spec_and_status_only():
    columns = [field.column for field in Kyma._meta.concrete_fields]
    assert len(columns) <= MOST_COLUMNS, columns
    for row in ROWS.values():
        assert row._meta.get_field("kyma").remote_field.model is Kyma


@pytest.mark.django_db
def test_given_the_hot_writes_then_none_of_them_writes_the_kyma_table():
    kyma = KymaFactory()
    for write in hot_writes(kyma.pk):
        with CaptureQueriesContext(connection) as captured:
            write()
        touching = [
            q["sql"]
            for q in captured.captured_queries
            if q["sql"].split()[0].upper() in ("UPDATE", "DELETE")
            and KYMA_TABLE in q["sql"].split(" SET ")[0]
        ]
        assert not touching, touching


@contextlib.contextmanager
def _in_other_transaction(work: Callable[[], None]) -> Iterator[None]:
    """Run ``work`` in a transaction of another connection and hold it open (its row locks taken)
    until the caller's block ends; then commit."""
    ready, done, failures = threading.Event(), threading.Event(), []

    def hold() -> None:
        try:
            with transaction.atomic():
                work()
                ready.set()
                done.wait(30)
        except BaseException as exc:  # handed to the test
            failures.append(exc)
            ready.set()
        finally:
            connection.close()

    thread = threading.Thread(target=hold)
    thread.start()
    assert ready.wait(30), "the other transaction did not start"
    try:
        yield
    finally:
        done.set()
        thread.join(30)
    assert not failures, failures


def _no_waiting(work: Callable[[], None]) -> None:
    """``work`` in a transaction that fails at once (instead of waiting) on a row lock."""
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL lock_timeout = '2s'")
        work()


# Row locks are PostgreSQL's (SQLite locks the whole database): these two run where the tests run
# on PostgreSQL (CI's first pass); everywhere, the statement check above stands for them.
ON_POSTGRESQL = settings.DATABASES["default"]["ENGINE"].endswith("postgresql")


if ON_POSTGRESQL:

    @pytest.mark.django_db(transaction=True)
    def test_given_held_lease_mark_and_heartbeat_rows_when_an_operator_edits_then_the_edit_does_not_wait():
        kyma = KymaFactory(channel="regular")

        def hold_the_machinery() -> None:
            writes = hot_writes(kyma.pk)
            for write in writes[:3] + writes[4:5] + writes[6:]:  # marks, the lease, the heartbeat
                write()

        with _in_other_transaction(hold_the_machinery):
            edited = Kyma.objects.get(pk=kyma.pk)
            edited.channel = "fast"
            _no_waiting(lambda: kyma_services.kyma_save(kyma=edited, reconcile=False))
        assert Kyma.objects.get(pk=kyma.pk).channel == "fast"
        assert ReconcileState.objects.get(kyma_id=kyma.pk).lease_owner == "worker:1:1"  # held on

    @pytest.mark.django_db(transaction=True)
    def test_given_an_operators_edit_in_progress_then_marks_leases_and_heartbeats_do_not_wait():
        kyma = KymaFactory(channel="regular")

        def edit_and_hold() -> None:  # as the admin, the API and ``apply`` edit: the row locked
            kyma_services.kyma_apply(
                namespace=kyma.namespace, name=kyma.name, runtime_id=kyma.runtime_id, channel="fast"
            )

        with _in_other_transaction(edit_and_hold):
            for write in hot_writes(kyma.pk):
                _no_waiting(write)
