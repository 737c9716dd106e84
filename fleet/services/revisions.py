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


# The deferred constraint trigger that stamps revisions at commit on PostgreSQL (migration 0014).
STAMP_TRIGGER = "controlplane_moduleconfig_stamp"
PENDING = -1  # a revision the commit will stamp


def moduleconfig_revision_stamp(config: ModuleConfig, *, created: bool = False) -> None:
    """Give the stored ``config`` the next revision (and, when ``created``, as its
    ``created_revision``), announced on commit: the last write of the caller's transaction.

    Every ModuleConfig change of the fleet takes the counter's row lock, which is held until the
    commit. On PostgreSQL the row is only marked here: a deferred trigger stamps and announces it
    as part of COMMIT, so the lock is held inside the server for the commit alone. (Stamped from
    Python, it was held while the client process got back to its COMMIT; under load that process
    waits for a CPU and its GIL, and the fleet's spec copies and status reports queued on the
    lock: bench/module_chain.py --trace, "sessions waiting on a lock".) ``config.revision`` is
    set once the value is known: after the commit, or at once inside a caller's transaction
    (which then holds the lock until it commits, as before)."""
    if connection.vendor != "postgresql":
        value = moduleconfig_revision_next()
        fields = {"revision": value, **({"created_revision": value} if created else {})}
        ModuleConfig.objects.filter(pk=config.pk).update(**fields)
        _stamped(config, (value, value if created else config.created_revision))
        return
    fields = {"revision": PENDING, **({"created_revision": PENDING} if created else {})}
    ModuleConfig.objects.filter(pk=config.pk).update(**fields)
    if len(connection.atomic_blocks) > 1:  # inside the caller's transaction: stamp it now
        with connection.cursor() as cursor:
            cursor.execute(f"SET CONSTRAINTS {connection.ops.quote_name(STAMP_TRIGGER)} IMMEDIATE")
        _read_back(config)
    else:
        transaction.on_commit(lambda: _read_back(config))


def _read_back(config: ModuleConfig) -> None:
    values = ModuleConfig.objects.filter(pk=config.pk).values_list("revision", "created_revision").first()
    if values is not None:
        _stamped(config, values)


def _stamped(config: ModuleConfig, values: tuple[int, int]) -> None:
    config.revision, config.created_revision = values


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
