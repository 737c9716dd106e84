"""The queue mark in the database: the Kyma's ``ReconcileMark`` row (SQLite, deployments without Redis).

A row is made by the first claim (an upsert that also checks the Kyma exists); claims are a plain
read first (no lock, no write: the common case in a burst finds the mark taken) and then one
conditional upsert ``INSERT ... SELECT ... ON CONFLICT (kyma_id) DO UPDATE ... WHERE <free>
RETURNING``, which decides races between concurrent claimers. The Kyma row itself is never
written, so a claim never waits on an operator's edit (nor the edit on a claim).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Sequence

from django.db import DatabaseError, connection
from django.utils import timezone

from fleet.models import Kyma, ReconcileMark
from fleet.queue.changes import MAX_CHANGES

from .base import BUSY_FOR, FULL, Started, clock_skew, from_stamp, mark_lines, mark_ttl, to_stamp

TABLE = ReconcileMark._meta.db_table
KYMAS = Kyma._meta.db_table
_FREE = f"({TABLE}.queued_at IS NULL OR {TABLE}.queued_at < %s)"


def _in(values: Sequence[object]) -> str:
    return ", ".join(["%s"] * len(values))


class DatabaseFlags:
    """The mark as a row beside the Kyma: for SQLite and deployments without Redis."""

    def claim(
        self,
        kyma_ids: Sequence[int],
        now: dt.datetime,
        eta: dt.datetime,
        changes: Sequence[str] = (),
        *,
        full: bool = False,
    ) -> list[int]:
        lines = mark_lines(changes, full=full)
        claimed = self._claim_free(kyma_ids, now, eta, lines)
        rest = [kyma_id for kyma_id in kyma_ids if kyma_id not in set(claimed)] if full else []
        # A marked Kyma's task may start between the two statements: its mark is gone then, and
        # this request claims a new one. (Bounded only against a database that misbehaves.)
        for _ in range(100):
            if not rest:
                break
            marked = self._mark_full(rest, now)
            won = self._claim_free([kyma_id for kyma_id in rest if kyma_id not in marked], now, eta, lines)
            claimed += won
            left = [kyma_id for kyma_id in rest if kyma_id not in marked and kyma_id not in won]
            if left == rest:  # no progress: Kymas that are gone have nothing to mark
                left = list(Kyma.objects.filter(id__in=left).values_list("id", flat=True))
            rest = left
        return claimed

    def _mark_full(self, kyma_ids: Sequence[int], now: dt.datetime) -> set[int]:
        """Add :data:`FULL` to the live marks of these Kymas; returns the Kymas whose mark says it."""
        adapt = connection.ops.adapt_datetimefield_value
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {TABLE} SET changes = CASE "
                "WHEN (%s || changes || %s) LIKE %s THEN changes "
                "WHEN changes = '' THEN %s ELSE changes || %s END "
                f"WHERE kyma_id IN ({_in(kyma_ids)}) AND queued_at >= %s RETURNING kyma_id",
                ["\n", "\n", f"%\n{FULL}\n%", FULL, f"\n{FULL}", *kyma_ids, adapt(now - mark_ttl())],
            )
            return {row[0] for row in cursor.fetchall()}

    def _claim_free(
        self, kyma_ids: Sequence[int], now: dt.datetime, eta: dt.datetime, changes: Sequence[str]
    ) -> list[int]:
        if not kyma_ids:
            return []
        adapt = connection.ops.adapt_datetimefield_value  # compare and store exactly as the ORM would
        stale = adapt(now - mark_ttl())
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT {KYMAS}.id FROM {KYMAS} LEFT JOIN {TABLE} ON {TABLE}.kyma_id = {KYMAS}.id "
                f"WHERE {KYMAS}.id IN ({_in(kyma_ids)}) AND {_FREE}",
                [*kyma_ids, stale],
            )
            candidates = [row[0] for row in cursor.fetchall()]
            if not candidates:
                return []
            # (the SELECT's WHERE also tells SQLite's parser where the upsert clause begins)
            cursor.execute(
                f"INSERT INTO {TABLE} (kyma_id, queued_at, not_before, changes) "
                f"SELECT id, %s, NULL, %s FROM {KYMAS} WHERE id IN ({_in(candidates)}) "
                "ON CONFLICT (kyma_id) DO UPDATE SET queued_at = excluded.queued_at, not_before = NULL, "
                f"changes = excluded.changes WHERE {_FREE} RETURNING kyma_id",
                [adapt(eta), "\n".join(changes), *candidates, stale],
            )
            return [row[0] for row in cursor.fetchall()]

    def claim_one(
        self,
        kyma_id: int,
        now: dt.datetime,
        eta: dt.datetime,
        need: dt.datetime | None,
        changes: Sequence[str] = (),
        fallback: dt.datetime | None = None,
    ) -> tuple[bool, dt.datetime]:
        stale = now - mark_ttl()
        # Each lost race means another request or a starting task moved the mark on: look again.
        # (Bounded only against a database that misbehaves; in practice it ends in a few rounds.)
        for _ in range(100):
            found = (
                Kyma.objects.filter(id=kyma_id)
                .values_list(
                    "reconcile_mark__queued_at",
                    "reconcile_mark__not_before",
                    "reconcile_mark__changes",
                    "reconcile_mark__spaced_until",
                )
                .first()
            )
            if found is None:
                return False, eta  # no such Kyma: nothing to queue
            marked, not_before, held, spaced = found
            if marked is None or marked < stale:
                due = max(eta, spaced) if spaced is not None else eta
                if self.claim([kyma_id], now, due, changes):
                    return True, due
                continue
            known = [line for line in held.split("\n") if line]
            merged, wanted = list(known), need
            for change in changes:
                if change in merged:
                    continue
                if len(merged) < MAX_CHANGES or change == FULL:
                    merged.append(change)
                    continue
                if FULL not in merged:  # a change left out: the task reads everything
                    merged.append(FULL)
                if fallback is not None:
                    wanted = fallback if wanted is None else max(wanted, fallback)
            update: dict = {}
            if merged != known:
                update["changes"] = "\n".join(merged)
            if wanted is not None and not (
                marked >= wanted + clock_skew() or (not_before is not None and not_before >= wanted)
            ):
                update["not_before"] = wanted
            start = max(marked, update.get("not_before") or not_before or marked)
            if not update:
                return False, start
            raised = ReconcileMark.objects.filter(
                kyma_id=kyma_id, queued_at=marked, not_before=not_before, changes=held
            ).update(**update)
            if raised:
                return False, start
        raise RuntimeError(f"the reconcile mark of Kyma {kyma_id} keeps changing; giving up")

    def claim_urgent(self, kyma_ids: Sequence[int], now: dt.datetime) -> list[int]:
        if not kyma_ids:
            return []
        adapt = connection.ops.adapt_datetimefield_value
        with connection.cursor() as cursor:
            cursor.execute(
                f"INSERT INTO {TABLE} (kyma_id, urgent_at, changes) "
                f"SELECT id, %s, '' FROM {KYMAS} WHERE id IN ({_in(kyma_ids)}) "
                "ON CONFLICT (kyma_id) DO UPDATE SET urgent_at = excluded.urgent_at "
                f"WHERE {TABLE}.urgent_at IS NULL OR {TABLE}.urgent_at < %s RETURNING kyma_id",
                [adapt(now), *kyma_ids, adapt(now - mark_ttl())],
            )
            won = {row[0] for row in cursor.fetchall()}
        return [kyma_id for kyma_id in kyma_ids if kyma_id in won]

    def started_urgent(self, kyma_id: int) -> None:
        ReconcileMark.objects.filter(kyma_id=kyma_id).update(urgent_at=None)

    def space(self, kyma_id: int, until: dt.datetime | None, *, if_free: bool = False) -> bool:
        if until is None:
            return bool(ReconcileMark.objects.filter(kyma_id=kyma_id).update(spaced_until=None))
        adapt = connection.ops.adapt_datetimefield_value
        free = f" WHERE {TABLE}.spaced_until IS NULL OR {TABLE}.spaced_until < %s" if if_free else ""
        with connection.cursor() as cursor:
            cursor.execute(
                f"INSERT INTO {TABLE} (kyma_id, spaced_until, changes) SELECT id, %s, '' FROM {KYMAS} "
                f"WHERE id = %s ON CONFLICT (kyma_id) DO UPDATE SET spaced_until = excluded.spaced_until"
                f"{free} RETURNING kyma_id",
                [adapt(until), kyma_id, *([adapt(timezone.now())] if if_free else [])],
            )
            return cursor.fetchone() is not None

    def busy(self, kyma_ids: Sequence[int]) -> set[int]:
        # The hint stays after its time (a quiet reconcile clears it): it was spaced lately.
        lately = timezone.now() - dt.timedelta(seconds=BUSY_FOR)
        rows = ReconcileMark.objects.filter(kyma_id__in=kyma_ids, spaced_until__gt=lately)
        return set(rows.values_list("kyma_id", flat=True))

    def release(self, kyma_ids: Sequence[int], eta: dt.datetime) -> None:
        ReconcileMark.objects.filter(kyma_id__in=kyma_ids, queued_at=eta).update(queued_at=None)

    def started(self, kyma_id: int, *, space_until: dt.datetime | None = None) -> Started:
        start = self._started(kyma_id)
        try:  # a hint: the start stands without it
            spaced = space_until is not None and self.space(kyma_id, space_until, if_free=True)
        except DatabaseError:
            spaced = False
        return dataclasses.replace(start, spaced=True) if spaced else start

    def _started(self, kyma_id: int) -> Started:
        # RETURNING gives the row as this UPDATE leaves it: "not before" and the changes as they
        # were when the mark went (a claim resets them; a request adds to them only while the
        # mark is there).
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {TABLE} SET queued_at = NULL WHERE kyma_id = %s "
                "AND queued_at IS NOT NULL RETURNING not_before, changes",
                [kyma_id],
            )
            row = cursor.fetchone()
        if row is None:
            return Started()
        value, held = row
        changes = tuple(line for line in (held or "").split("\n") if line)
        if value is None:
            return Started(None, changes, found=True)
        if isinstance(value, str):  # SQLite hands back the stored text
            value = dt.datetime.fromisoformat(value)
        when = value if timezone.is_aware(value) else timezone.make_aware(value, dt.UTC)
        return Started(when, changes, found=True)

    def queued(self, kyma_ids: Sequence[int]) -> set[int]:
        stale = timezone.now() - mark_ttl()
        rows = ReconcileMark.objects.filter(kyma_id__in=kyma_ids, queued_at__gte=stale)
        return set(rows.values_list("kyma_id", flat=True))

    def queued_count(self) -> int:
        return ReconcileMark.objects.filter(queued_at__gte=timezone.now() - mark_ttl()).count()

    def overdue(self, before: dt.datetime, limit: int) -> list[tuple[int, str]]:
        rows = ReconcileMark.objects.filter(queued_at__lt=before).values_list("kyma_id", "queued_at")[:limit]
        return [(kyma_id, to_stamp(eta)) for kyma_id, eta in rows]

    def refresh(self, kyma_id: int, eta: str, now: dt.datetime) -> bool:
        rows = ReconcileMark.objects.filter(kyma_id=kyma_id, queued_at=from_stamp(eta))
        return bool(rows.update(queued_at=now))
