"""When a Kyma's next periodic reconcile is due: its ``ReconcileState`` row, beside the lease.

A reconcile ends with one write (:func:`reconcile_finished`): when it ran, when the next one is
due (by state, ``reconciler.status.next_interval``), its error streak, and the lease released in
the same UPDATE (none if the lease was lost meanwhile). Beat's sweep asks which Kymas are due
(``fleet.selectors.kyma_ids_due``); a request whose publish failed makes its Kymas due now
(:func:`due_now`), so the sweep queues them once the broker is back.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from django.db import connection

from fleet.models import Kyma, ReconcileState

from .lease import KEEPER

TABLE = ReconcileState._meta.db_table
KYMAS = Kyma._meta.db_table


def _upsert(kyma_ids: Sequence[int], values: dict[str, object]) -> None:
    """Set ``values`` on the rows of these Kymas, making the rows that are missing."""
    if not kyma_ids:
        return
    adapt = connection.ops.adapt_datetimefield_value
    params = [adapt(v) if isinstance(v, dt.datetime) else v for v in values.values()]
    names = ", ".join(values)
    marks = ", ".join(["%s"] * len(values))
    updates = ", ".join(f"{name} = excluded.{name}" for name in values)
    defaults = {"lease_owner": "", "error_streak": 0}
    extra = {name: value for name, value in defaults.items() if name not in values}
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {TABLE} (kyma_id, {names}{''.join(', ' + n for n in extra)}) "
            f"SELECT id, {marks}{', %s' * len(extra)} FROM {KYMAS} "
            f"WHERE id IN ({', '.join(['%s'] * len(kyma_ids))}) "
            f"ON CONFLICT (kyma_id) DO UPDATE SET {updates}",
            [*params, *extra.values(), *kyma_ids],
        )


def due_now(kyma_ids: Sequence[int], now: dt.datetime) -> None:
    """Make these Kymas due for beat's sweep now."""
    _upsert(kyma_ids, {"next_reconcile_at": now})


def next_at(kyma_id: int, when: dt.datetime) -> None:
    """The next periodic reconcile of this Kyma is due at ``when`` (a paused Kyma's next look)."""
    _upsert([kyma_id], {"next_reconcile_at": when})


def reconcile_finished(
    kyma_id: int, *, owner: str, ran_at: dt.datetime, next_at: dt.datetime, error_streak: int
) -> bool:
    """A reconcile ends: when it ran, when the next is due, its error streak, and (``owner``) the
    lease released, in one statement. False when ``owner`` no longer held the lease (another
    worker took over: nothing is written). Without ``owner`` (a reconcile run by hand, holding
    no lease) the row is written whatever holds it."""
    values = {"last_reconcile_at": ran_at, "next_reconcile_at": next_at, "error_streak": error_streak}
    if not owner:
        _upsert([kyma_id], values)
        return True
    KEEPER.drop(kyma_id, owner)
    adapt = connection.ops.adapt_datetimefield_value
    with connection.cursor() as cursor:  # (plain SQL: the ORM's UPDATE cost a no-op 1 ms of CPU)
        cursor.execute(
            f"UPDATE {TABLE} SET lease_owner = '', lease_until = NULL, last_reconcile_at = %s, "
            "next_reconcile_at = %s, error_streak = %s WHERE kyma_id = %s AND lease_owner = %s",
            [adapt(ran_at), adapt(next_at), error_streak, kyma_id, owner],
        )
        return cursor.rowcount > 0
