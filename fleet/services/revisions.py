"""ModuleConfig revisions: the next one, announced to open watches, and deletion tombstones.

Every change a module manager must see takes the next revision here. On PostgreSQL the revision is
announced with ``pg_notify`` in the same transaction, so listeners hear it exactly when it is
committed, in commit (= revision) order; with a Redis broker (and another database) it is published
after commit; on SQLite watches poll. The announcement only wakes watchers: they read the rows
themselves, so a lost announcement delays a change (until the next poll), never loses it.
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
from typing import Any

import redis
from django.conf import settings
from django.db import connection, transaction
from django.db.models import Max

from fleet.models import ModuleConfig, ModuleConfigDeletion, RevisionCounter

CHANNEL = "controlplane_moduleconfig"
# A RevisionCounter row used as a watermark: deletions up to this revision have been pruned.
COMPACTED = "moduleconfig-compacted"
log = logging.getLogger(__name__)


@functools.cache
def _redis() -> redis.Redis:
    return redis.Redis.from_url(
        settings.MODULECONFIG_WATCH_REDIS_URL, socket_timeout=2, socket_connect_timeout=2
    )


def _publish(value: int) -> None:
    try:
        _redis().publish(f"{settings.RECONCILE_FLAGS_PREFIX}:{CHANNEL}", str(value))
    except redis.RedisError as exc:  # watchers still find it at their next poll
        log.warning("could not announce ModuleConfig revision %s: %s", value, exc)


def moduleconfig_revision_next() -> int:
    """The next ModuleConfig revision (inside the caller's transaction), announced on commit."""
    value = RevisionCounter.next(ModuleConfig.REVISION_SEQUENCE)
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_notify(%s, %s)", [CHANNEL, str(value)])
    elif settings.MODULECONFIG_WATCH_REDIS_URL:
        transaction.on_commit(lambda: _publish(value))
    return value


def moduleconfig_revision_stamp(config: ModuleConfig, *, created: bool = False) -> int:
    """Give the stored ``config`` the next revision (and, when ``created``, as its
    ``created_revision``), announced on commit: the last write of the caller's transaction.

    The counter's row stays locked from here until the commit, and every ModuleConfig change of
    the fleet takes it: taken first, it was held through the rest of the transaction, and under
    load half of the workers' threads queued on it (bench/module_chain.py, py-spy). On
    PostgreSQL the counter, the config's row and the announcement are one statement."""
    if connection.vendor != "postgresql":
        value = moduleconfig_revision_next()
        fields = {"revision": value, **({"created_revision": value} if created else {})}
        ModuleConfig.objects.filter(pk=config.pk).update(**fields)
    else:
        counter = connection.ops.quote_name(RevisionCounter._meta.db_table)
        table = connection.ops.quote_name(ModuleConfig._meta.db_table)
        also = ", created_revision = c.value" if created else ""
        sql = (
            f"WITH c AS (UPDATE {counter} SET value = value + 1 WHERE name = %s RETURNING value) "
            f"UPDATE {table} SET revision = c.value{also} FROM c WHERE {table}.id = %s "
            "RETURNING c.value, pg_notify(%s, c.value::text)"
        )
        with connection.cursor() as cursor:
            cursor.execute(sql, [ModuleConfig.REVISION_SEQUENCE, config.pk, CHANNEL])
            row = cursor.fetchone()
        if row is None:  # the counter's first use (or the row vanished: nothing is stamped then)
            if not ModuleConfig.objects.filter(pk=config.pk).exists():
                raise ModuleConfig.DoesNotExist(f"ModuleConfig {config.pk} is gone")
            RevisionCounter.objects.get_or_create(name=ModuleConfig.REVISION_SEQUENCE)
            return moduleconfig_revision_stamp(config, created=created)
        value = row[0]
    config.revision = value
    if created:
        config.created_revision = value
    return value


def moduleconfig_deleted(sender: Any, instance: ModuleConfig, **kwargs: Any) -> None:
    """``post_delete`` receiver: a deleted ModuleConfig leaves a tombstone with a new revision, so
    a watch resumed from before the deletion still reports it (Django sends this for cascades
    from a Kyma or Module too, inside the deleting transaction)."""
    with transaction.atomic():
        ModuleConfigDeletion.objects.create(
            revision=moduleconfig_revision_next(),
            uid=instance.uid,
            namespace=instance.namespace,
            name=instance.name,
            kyma_name=instance.kyma.name if instance.kyma_id else "",
            runtime_id=instance.kyma.runtime_id if instance.kyma_id else "",
            module_name=instance.module.name if instance.module_id else "",
        )


def moduleconfig_compacted_revision() -> int:
    """Up to which revision deletions were pruned: a watch from before it would miss some."""
    value = RevisionCounter.objects.filter(name=COMPACTED).values_list("value", flat=True).first()
    return value or 0


def moduleconfig_deletions_prune(*, older_than: dt.datetime) -> int:
    """Drop tombstones older than ``older_than`` and raise the compaction watermark past them, so
    a watch resumed from before it is told to start over (410) instead of missing a deletion."""
    with transaction.atomic():
        old = ModuleConfigDeletion.objects.filter(deleted_at__lt=older_than)
        highest = old.aggregate(highest=Max("revision"))["highest"]
        if highest is None:
            return 0
        RevisionCounter.objects.get_or_create(name=COMPACTED)
        mark = RevisionCounter.objects.select_for_update().get(name=COMPACTED)
        mark.value = max(mark.value, highest)
        mark.save(update_fields=["value"])
        return ModuleConfigDeletion.objects.filter(revision__lte=highest).delete()[0]
