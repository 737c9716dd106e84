"""The ModuleConfig revision counter: every change of the fleet's module configs takes its row lock,
held until commit, so it must be taken by the transaction's last write (under load, taken first,
half of the workers' threads queued on it)."""

from __future__ import annotations

import threading

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from fleet.models import ModuleConfig, RevisionCounter
from fleet.services import modules as module_services
from fleet.services.revisions import PENDING
from tests.factories import KymaFactory, ModuleFactory

pytestmark = pytest.mark.django_db(transaction=True)


def _upsert(kyma, module, replicas: int) -> ModuleConfig:
    config, changed = module_services.moduleconfig_upsert(
        kyma=kyma,
        module=module,
        spec={"replicas": replicas},
        source_generation=replicas,
        source_resource_version="",
    )
    assert changed
    return config


def _writes_after_the_counter(change) -> list[str]:
    """Run ``change`` in a transaction; the statements that ran after the counter's, up to commit."""
    at_commit: list[int] = []
    with CaptureQueriesContext(connection) as captured, transaction.atomic():
        transaction.on_commit(lambda: at_commit.append(len(captured.captured_queries)))
        change()
    statements = [query["sql"] for query in captured.captured_queries[: at_commit[0]]]
    counter, table = RevisionCounter._meta.db_table, ModuleConfig._meta.db_table
    [first] = [
        i
        for i, sql in enumerate(statements)
        if (counter in sql and sql.lstrip().upper().startswith(("UPDATE", "WITH")))
        or " ".join(sql.split()).startswith(f'UPDATE "{table}" SET "revision" = {PENDING}')  # PostgreSQL
    ]
    return [
        sql for sql in statements[first + 1 :] if "SAVEPOINT" not in sql.upper() and sql.upper() != "COMMIT"
    ]


def _change(change: str, kyma, module, config: ModuleConfig | None) -> ModuleConfig:
    if change == "status reported":
        module_services.moduleconfig_set_status(config=config, status={"state": "Ready"})
        return config
    return _upsert(kyma, module, 2)


def _check_stamped(change: str, returned: ModuleConfig, config: ModuleConfig | None, before: int) -> None:
    stored = ModuleConfig.objects.get(pk=returned.pk)
    assert stored.revision > before
    if change != "status reported":  # the config handed back knows its revision
        assert returned.revision == stored.revision
    if change == "created":
        assert stored.created_revision == stored.revision
    else:
        assert stored.created_revision == config.created_revision == before
    if change == "status reported":
        assert stored.status == {"state": "Ready"}


@pytest.mark.parametrize("change", ["created", "spec changed", "status reported"])
def test_the_revision_is_taken_by_the_last_write_before_commit(change):
    """Inside a caller's transaction the revision is taken at once, by its last write: the
    counter's lock is held until that transaction commits."""
    RevisionCounter.objects.get_or_create(name=ModuleConfig.REVISION_SEQUENCE)  # its first use: below
    kyma, module = KymaFactory(), ModuleFactory()
    config = _upsert(kyma, module, 1) if change != "created" else None
    before = config.revision if config else 0
    holder: list[ModuleConfig] = []

    after = _writes_after_the_counter(lambda: holder.append(_change(change, kyma, module, config)))

    # PostgreSQL: the row is marked, and the commit's trigger, fired at once here, stamps it;
    # elsewhere the config's revision follows the counter.
    table = ModuleConfig._meta.db_table
    if connection.vendor == "postgresql":
        # fired at once (this transaction is the caller's), then the value read back
        assert [sql.split()[0].upper() for sql in after] == ["SET", "SELECT"], after
    else:
        assert len(after) == 1 and table in after[0], after
    _check_stamped(change, holder[0], config, before)


@pytest.mark.parametrize("change", ["created", "spec changed", "status reported"])
def test_in_its_own_transaction_the_writer_takes_the_counter_only_elsewhere(change):
    """On PostgreSQL no statement of the writer touches the counter (the commit's trigger stamps
    the row); elsewhere the writer takes it once. Either way the config handed back knows its
    revision."""
    RevisionCounter.objects.get_or_create(name=ModuleConfig.REVISION_SEQUENCE)  # its first use: below
    kyma, module = KymaFactory(), ModuleFactory()
    config = _upsert(kyma, module, 1) if change != "created" else None
    before = config.revision if config else 0
    with CaptureQueriesContext(connection) as captured:
        returned = _change(change, kyma, module, config)
    counter = RevisionCounter._meta.db_table
    touching = [q["sql"] for q in captured.captured_queries if counter in q["sql"]]
    assert len(touching) == (0 if connection.vendor == "postgresql" else 1), touching
    _check_stamped(change, returned, config, before)


def test_a_change_waiting_for_its_commit_holds_no_other_change_back():
    """A transaction that changed a config and has not committed yet (its process may be waiting
    for a CPU) does not hold the counter on PostgreSQL: another config's change commits meanwhile,
    and the first one's commit then takes the next revision. Elsewhere the revision is taken
    from Python: the schema has no trigger for it."""
    kyma, first, second = KymaFactory(), ModuleFactory(), ModuleFactory()
    a, b = _upsert(kyma, first, 1), _upsert(kyma, second, 1)
    if connection.vendor != "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM sqlite_master WHERE type = 'trigger'")
            assert cursor.fetchone()[0] == 0
        return
    opened, release, done = threading.Event(), threading.Event(), threading.Event()
    failures: list[BaseException] = []

    def open_change() -> None:
        try:
            with transaction.atomic():  # what the service writes on PostgreSQL: the row, marked
                ModuleConfig.objects.filter(pk=a.pk).update(status={"state": "Warning"}, revision=PENDING)
                opened.set()
                release.wait(30)
        except BaseException as exc:  # pragma: no cover - reported below
            failures.append(exc)
        finally:
            connection.close()

    def other_change() -> None:
        try:
            module_services.moduleconfig_set_status(config=b, status={"state": "Ready"})
            done.set()
        except BaseException as exc:  # pragma: no cover - reported below
            failures.append(exc)
        finally:
            connection.close()

    holder = threading.Thread(target=open_change)
    holder.start()
    try:
        assert opened.wait(30)
        # With the lock held until the first commit, this would wait for ``release``.
        other = threading.Thread(target=other_change)
        other.start()
        assert done.wait(30), "the second change waited for the first one's commit"
    finally:
        release.set()
        holder.join(30)
    other.join(30)
    assert not failures, failures
    a.refresh_from_db()
    b.refresh_from_db()
    assert b.revision < a.revision  # committed first, revision first


def test_revisions_grow_across_configs_and_the_counter_starts_by_itself():
    RevisionCounter.objects.filter(name=ModuleConfig.REVISION_SEQUENCE).delete()
    kyma, first, second = KymaFactory(), ModuleFactory(), ModuleFactory()
    a = _upsert(kyma, first, 1)
    b = _upsert(kyma, second, 1)
    a2 = _upsert(kyma, first, 2)
    assert (a.revision, b.revision, a2.revision) == (1, 2, 3)
    assert [c.created_revision for c in ModuleConfig.objects.order_by("pk")] == [1, 2]
