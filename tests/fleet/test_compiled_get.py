"""A read whose SQL is compiled once per process (``fleet.models.compiled``): the same instances
the ORM makes, the rows beside them included (or known missing), in one query."""

from __future__ import annotations

import pytest
from django.core.exceptions import ObjectDoesNotExist
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from fleet import queue
from fleet.models import Kyma, ReconcileState, SyncResource
from fleet.models.bookkeeping import KYMA_WITH_ROWS, RECONCILE_ROWS, row_or_default
from fleet.models.compiled import CompiledQuery
from tests.factories import KymaFactory, SyncResourceFactory, beside

pytestmark = pytest.mark.django_db


def values(kyma: Kyma) -> dict:
    """Every column of the Kyma and of each row beside it (``None``: no row)."""
    found = {f.attname: getattr(kyma, f.attname) for f in kyma._meta.concrete_fields}
    for name in RECONCILE_ROWS:
        try:
            row = getattr(kyma, name)
        except ObjectDoesNotExist:
            found[name] = None
            continue
        found[name] = {f.attname: getattr(row, f.attname) for f in row._meta.concrete_fields}
    return found


def test_given_a_kyma_with_its_rows_then_the_read_equals_the_orms_in_one_query():
    kyma = KymaFactory(conditions=[{"type": "Runtime", "status": "True"}], modules=[{"name": "keda"}])
    beside(kyma, watcher_last_seen_at=timezone.now(), runtime_verified={"k": ["h", 1]}, error_streak=2)
    with CaptureQueriesContext(connection) as captured:
        read = KYMA_WITH_ROWS.get(kyma.pk)
        values(read)
    assert len(captured) == 1
    orm = Kyma.objects.select_related(*RECONCILE_ROWS).get(pk=kyma.pk)
    assert values(read) == values(orm)
    assert read.watcher_last_seen_at is not None and read.error_streak == 2
    assert read.kubeconfig == orm.kubeconfig and read._state.adding is False
    read.save()  # an instance as the ORM's: it can be written back


def test_given_a_kyma_without_rows_then_they_read_as_missing_without_a_query():
    kyma = KymaFactory()
    read = KYMA_WITH_ROWS.get(kyma.pk)
    assert values(read) == values(Kyma.objects.select_related(*RECONCILE_ROWS).get(pk=kyma.pk))
    with CaptureQueriesContext(connection) as captured:
        assert read.last_reconcile_at is None and read.watcher_last_seen_at is None
        assert row_or_default(read, "runtime_sync").runtime_verified == {}
    assert len(captured) == 0


def test_given_no_such_kyma_then_none():
    assert KYMA_WITH_ROWS.get(KymaFactory().pk + 1000) is None


SYNCS: CompiledQuery[SyncResource] = CompiledQuery(
    lambda: SyncResource.objects.select_related("module").filter(kyma__channel="regular"), "kyma_id"
)


def test_given_some_keys_then_the_rows_of_each_in_the_querysets_order_in_one_query():
    kymas = [KymaFactory(channel="regular") for _ in range(3)]
    other = KymaFactory(channel="fast")
    for kyma in (*kymas, other):
        for name in ("b", "a"):
            SyncResourceFactory(kyma=kyma, name=f"{kyma.name}-{name}")
    keys = [kymas[0].pk, kymas[2].pk, other.pk]
    with CaptureQueriesContext(connection) as captured:
        rows = SYNCS.rows(keys)
        modules = [row.module.name for row in rows]
    assert len(captured) == 1
    expected = list(
        SyncResource.objects.select_related("module").filter(kyma__channel="regular", kyma_id__in=keys)
    )
    assert [row.pk for row in rows] == [row.pk for row in expected] and len(rows) == 4
    assert modules == [row.module.name for row in expected]
    assert [row.name for row in SYNCS.rows([kymas[1].pk])] == [f"{kymas[1].name}-a", f"{kymas[1].name}-b"]


def test_given_no_keys_then_no_rows_and_no_query():
    with CaptureQueriesContext(connection) as captured:
        assert SYNCS.rows([]) == []
    assert len(captured) == 0


def test_given_a_free_lease_then_it_is_taken_and_the_kyma_read_under_it_as_the_lease_left_it():
    kyma = KymaFactory(modules=[{"name": "keda"}])
    beside(kyma, watcher_last_seen_at=timezone.now(), error_streak=2)
    with CaptureQueriesContext(connection) as captured:
        read = queue.lease_acquire_read(kyma.pk, owner="me:1:1")
        found = values(read)
    try:
        # one statement on PostgreSQL (the lease's write and the read), two elsewhere
        assert len(captured) == (1 if connection.vendor == "postgresql" else 2)
        assert found["reconcile_state"]["lease_owner"] == "me:1:1"
        assert found["reconcile_state"]["error_streak"] == 2  # the rest of the row as it was
        assert found["reconcile_state"]["lease_until"] == ReconcileState.objects.get(kyma=kyma).lease_until
        assert found["modules"] == [{"name": "keda"}] and found["watcher_contact"]["last_seen_at"]
        assert found == values(Kyma.objects.select_related(*RECONCILE_ROWS).get(pk=kyma.pk))
    finally:
        queue.lease_release(kyma.pk, owner="me:1:1")


def test_given_a_lease_held_by_another_or_no_kyma_then_nothing_is_read_or_taken():
    kyma = KymaFactory()
    assert queue.lease_acquire(kyma.pk, owner="other:1:1")
    try:
        assert queue.lease_acquire_read(kyma.pk, owner="me:1:1") is None
        assert ReconcileState.objects.get(kyma=kyma).lease_owner == "other:1:1"
    finally:
        queue.lease_release(kyma.pk, owner="other:1:1")
    assert queue.lease_acquire_read(kyma.pk + 1000, owner="me:1:1") is None
    assert not ReconcileState.objects.filter(kyma_id=kyma.pk + 1000).exists()


def test_given_a_first_reconcile_then_its_lease_row_is_made_and_read_in_the_same_step():
    kyma = KymaFactory()
    read = queue.lease_acquire_read(kyma.pk, owner="me:1:1")
    try:
        assert read.reconcile_state.lease_owner == "me:1:1" and read.reconcile_state.error_streak == 0
        assert read.reconcile_state.last_reconcile_at is None
    finally:
        queue.lease_release(kyma.pk, owner="me:1:1")
