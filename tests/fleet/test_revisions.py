"""The ModuleConfig revision counter: every change of the fleet's module configs takes its row lock,
held until commit, so it must be taken by the transaction's last write (under load, taken first,
half of the workers' threads queued on it)."""

from __future__ import annotations

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from fleet.models import ModuleConfig, RevisionCounter
from fleet.services import modules as module_services
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
    counter = RevisionCounter._meta.db_table
    [first] = [
        i
        for i, sql in enumerate(statements)
        if counter in sql and sql.lstrip().upper().startswith(("UPDATE", "WITH"))
    ]
    return [
        sql for sql in statements[first + 1 :] if "SAVEPOINT" not in sql.upper() and sql.upper() != "COMMIT"
    ]


@pytest.mark.parametrize("change", ["created", "spec changed", "status reported"])
def test_the_revision_is_taken_by_the_last_write_before_commit(change):
    RevisionCounter.objects.get_or_create(name=ModuleConfig.REVISION_SEQUENCE)  # its first use: below
    kyma, module = KymaFactory(), ModuleFactory()
    config = _upsert(kyma, module, 1) if change != "created" else None
    before = config.revision if config else 0
    holder: list[ModuleConfig] = []

    def write() -> None:
        if change == "status reported":
            module_services.moduleconfig_set_status(config=config, status={"state": "Ready"})
            holder.append(config)
        else:
            holder.append(_upsert(kyma, module, 2))

    after = _writes_after_the_counter(write)

    # PostgreSQL: the counter, the config's revision and the announcement are one statement;
    # elsewhere the config's revision follows it.
    table = ModuleConfig._meta.db_table
    if connection.vendor == "postgresql":
        assert after == []
    else:
        assert len(after) == 1 and table in after[0], after
    stored = ModuleConfig.objects.get(pk=holder[0].pk)
    assert stored.revision > before
    if change != "status reported":  # the config returned knows its revision
        assert holder[0].revision == stored.revision
    if change == "created":
        assert stored.created_revision == stored.revision
    else:
        assert stored.created_revision == config.created_revision == before
    if change == "status reported":
        assert stored.status == {"state": "Ready"}


def test_revisions_grow_across_configs_and_the_counter_starts_by_itself():
    RevisionCounter.objects.filter(name=ModuleConfig.REVISION_SEQUENCE).delete()
    kyma, first, second = KymaFactory(), ModuleFactory(), ModuleFactory()
    a = _upsert(kyma, first, 1)
    b = _upsert(kyma, second, 1)
    a2 = _upsert(kyma, first, 2)
    assert (a.revision, b.revision, a2.revision) == (1, 2, 3)
    assert [c.created_revision for c in ModuleConfig.objects.order_by("pk")] == [1, 2]
