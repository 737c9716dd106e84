"""Keeping the inspection records bounded: the newest N rows per Kyma stay, older ones go."""

from __future__ import annotations

from django.db import connection, models


def prune_per_kyma(model: type[models.Model], *, keep: int, order_field: str) -> int:
    """Delete all but the ``keep`` newest rows of each Kyma (one statement, any database)."""
    table = model._meta.db_table
    column = model._meta.get_field(order_field).column
    sql = (
        f"DELETE FROM {table} WHERE id IN (SELECT id FROM ("
        f"SELECT id, ROW_NUMBER() OVER (PARTITION BY kyma_id ORDER BY {column} DESC, id DESC) AS position "
        f"FROM {table}) ranked WHERE position > %s)"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [keep])
        return cursor.rowcount
