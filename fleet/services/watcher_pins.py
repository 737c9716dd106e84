"""Which runtime-watcher settings each runtime gets: the Kymas' ``WatcherSettingsPin`` rows.

Written by rollouts (a wave moves its runtimes to the new settings) and, once per Kyma, by its
first reconcile (the fleet's settings, unless something pinned it meanwhile). Never the Kyma row.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.db import connection

from fleet.models import Kyma, WatcherSettingsPin

TABLE = WatcherSettingsPin._meta.db_table
KYMAS = Kyma._meta.db_table
BATCH = 1000


def watcher_settings_pin(*, kyma_ids: Iterable[int], digest: str) -> None:
    """Pin ``digest`` on these Kymas (those that still exist)."""
    ids = list(kyma_ids)
    for start in range(0, len(ids), BATCH):
        chunk = ids[start : start + BATCH]
        with connection.cursor() as cursor:
            cursor.execute(
                f"INSERT INTO {TABLE} (kyma_id, digest) SELECT id, %s FROM {KYMAS} "
                f"WHERE id IN ({', '.join(['%s'] * len(chunk))}) "
                "ON CONFLICT (kyma_id) DO UPDATE SET digest = excluded.digest",
                [digest, *chunk],
            )


def watcher_settings_pin_first(*, kyma_id: int, digest: str) -> str:
    """Pin ``digest`` on the Kyma unless it has a pin already; returns the pin it has now ("" when
    the Kyma is gone)."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {TABLE} (kyma_id, digest) SELECT id, %s FROM {KYMAS} WHERE id = %s "
            f"ON CONFLICT (kyma_id) DO UPDATE SET digest = excluded.digest WHERE {TABLE}.digest = ''",
            [digest, kyma_id],
        )
    return WatcherSettingsPin.objects.filter(kyma_id=kyma_id).values_list("digest", flat=True).first() or ""
