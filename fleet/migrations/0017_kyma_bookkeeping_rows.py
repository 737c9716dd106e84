"""The Kyma row keeps the Kyma: scheduling, lease, queue-mark, heartbeat and push bookkeeping move
to rows of their own (fleet.models.bookkeeping), each row copied from the Kyma's columns.

Expand/contract: the Kyma table KEEPS its old columns in this release (only Django's state drops
them), so the previous release's processes, which read and write them, run unchanged beside this
one during a rolling update. The old columns that are NOT NULL get a database default, so this
release inserts Kymas without naming them. A later release drops them (see
docs/operators/upgrades.md, "Release notes for the database").
"""

from django.db import migrations, models
from django.db.models import Value

# The Kyma's old columns -> (new table, new column); copied row by row by INSERT ... SELECT.
COPIES = {
    "controlplane_reconcilestate": (
        ("lease_owner", "lease_owner"),
        ("lease_until", "lease_until"),
        ("last_reconcile_at", "last_reconcile_at"),
        ("next_reconcile_at", "next_reconcile_at"),
        ("error_streak", "error_streak"),
    ),
    "controlplane_reconcilemark": (
        ("reconcile_queued_at", "queued_at"),
        ("reconcile_not_before", "not_before"),
        ("reconcile_changes", "changes"),
        ("reconcile_spaced_until", "spaced_until"),
        ("reconcile_urgent_at", "urgent_at"),
    ),
    "controlplane_watchercontact": (
        ("watcher_last_seen_at", "last_seen_at"),
        ("watcher_report", "report"),
    ),
    "controlplane_runtimesync": (
        ("runtime_kyma_generation", "runtime_kyma_generation"),
        ("pushed_generation", "pushed_generation"),
        ("applied_watchers", "applied_watchers"),
        ("runtime_verified", "runtime_verified"),
    ),
    "controlplane_watchersettingspin": (("watcher_settings", "digest"),),
}
# Rows that say nothing but the defaults are not made (a reader finds the defaults anyway).
WORTH_A_ROW = {
    "controlplane_reconcilestate": "1 = 1",
    "controlplane_reconcilemark": (
        "reconcile_queued_at IS NOT NULL OR reconcile_not_before IS NOT NULL OR reconcile_changes <> '' "
        "OR reconcile_spaced_until IS NOT NULL OR reconcile_urgent_at IS NOT NULL"
    ),
    "controlplane_watchercontact": "watcher_last_seen_at IS NOT NULL",
    "controlplane_runtimesync": "1 = 1",
    "controlplane_watchersettingspin": "watcher_settings <> ''",
}
OLD_FIELDS = [old for pairs in COPIES.values() for old, _ in pairs]


def copy_forward(apps, schema_editor):
    with schema_editor.connection.cursor() as cursor:
        for table, pairs in COPIES.items():
            new = ", ".join(column for _, column in pairs)
            old = ", ".join(column for column, _ in pairs)
            cursor.execute(
                f"INSERT INTO {table} (kyma_id, {new}) SELECT id, {old} FROM controlplane_kyma "
                f"WHERE {WORTH_A_ROW[table]}"
            )


def copy_back(apps, schema_editor):
    """Back to the Kyma's columns (migrating backwards to 0015): what the rows say now."""
    with schema_editor.connection.cursor() as cursor:
        for table, pairs in COPIES.items():
            for old, new in pairs:
                cursor.execute(
                    f"UPDATE controlplane_kyma SET {old} = (SELECT {new} FROM {table} "
                    f"WHERE {table}.kyma_id = controlplane_kyma.id) "
                    f"WHERE id IN (SELECT kyma_id FROM {table})"
                )


def _one_to_one(related_name):
    return models.OneToOneField(
        on_delete=models.deletion.CASCADE,
        primary_key=True,
        related_name=related_name,
        serialize=False,
        to="controlplane.kyma",
    )


class Migration(migrations.Migration):
    dependencies = [
        ("controlplane", "0016_mandatory_modules_and_counters_i33"),
    ]

    operations = [
        migrations.CreateModel(
            name="ReconcileState",
            fields=[
                ("kyma", _one_to_one("reconcile_state")),
                ("lease_owner", models.CharField(blank=True, default="", max_length=128)),
                ("lease_until", models.DateTimeField(blank=True, null=True)),
                ("last_reconcile_at", models.DateTimeField(blank=True, null=True)),
                ("next_reconcile_at", models.DateTimeField(blank=True, null=True)),
                ("error_streak", models.PositiveIntegerField(default=0)),
            ],
            options={
                "abstract": False,
                "indexes": [
                    models.Index(fields=["next_reconcile_at"], name="reconcile_state_next"),
                    models.Index(fields=["lease_until"], name="reconcile_state_lease"),
                ],
            },
        ),
        migrations.CreateModel(
            name="ReconcileMark",
            fields=[
                ("kyma", _one_to_one("reconcile_mark")),
                ("queued_at", models.DateTimeField(blank=True, null=True)),
                ("not_before", models.DateTimeField(blank=True, null=True)),
                ("changes", models.TextField(blank=True, default="")),
                ("spaced_until", models.DateTimeField(blank=True, null=True)),
                ("urgent_at", models.DateTimeField(blank=True, null=True)),
            ],
            options={"abstract": False},
        ),
        migrations.CreateModel(
            name="WatcherContact",
            fields=[
                ("kyma", _one_to_one("watcher_contact")),
                ("last_seen_at", models.DateTimeField(blank=True, db_index=True, null=True)),
                ("report", models.JSONField(blank=True, default=dict)),
            ],
            options={"abstract": False},
        ),
        migrations.CreateModel(
            name="RuntimeSync",
            fields=[
                ("kyma", _one_to_one("runtime_sync")),
                ("runtime_kyma_generation", models.BigIntegerField(default=0)),
                ("pushed_generation", models.BigIntegerField(default=0)),
                ("applied_watchers", models.JSONField(blank=True, default=list)),
                ("runtime_verified", models.JSONField(blank=True, default=dict)),
            ],
            options={"abstract": False},
        ),
        migrations.CreateModel(
            name="WatcherSettingsPin",
            fields=[
                ("kyma", _one_to_one("watcher_settings_pin")),
                ("digest", models.CharField(blank=True, db_index=True, default="", max_length=64)),
            ],
            options={"abstract": False},
        ),
        migrations.RunPython(copy_forward, copy_back),
        # Expand: the old NOT NULL columns get a database default (this release's INSERTs leave
        # them out); the previous release still reads and writes every one of them.
        migrations.AlterField(
            model_name="kyma",
            name="reconcile_changes",
            field=models.TextField(blank=True, default="", db_default="", editable=False),
        ),
        migrations.AlterField(
            model_name="kyma",
            name="lease_owner",
            field=models.CharField(blank=True, max_length=128, db_default=""),
        ),
        migrations.AlterField(
            model_name="kyma",
            name="error_streak",
            field=models.PositiveIntegerField(default=0, db_default=0),
        ),
        migrations.AlterField(
            model_name="kyma",
            name="runtime_kyma_generation",
            field=models.BigIntegerField(default=0, db_default=0, editable=False),
        ),
        migrations.AlterField(
            model_name="kyma",
            name="pushed_generation",
            field=models.BigIntegerField(default=0, db_default=0, editable=False),
        ),
        migrations.AlterField(
            model_name="kyma",
            name="applied_watchers",
            field=models.JSONField(
                blank=True, default=list, db_default=Value([], models.JSONField()), editable=False
            ),
        ),
        migrations.AlterField(
            model_name="kyma",
            name="watcher_settings",
            field=models.CharField(blank=True, db_index=True, max_length=64, db_default="", editable=False),
        ),
        migrations.AlterField(
            model_name="kyma",
            name="runtime_verified",
            field=models.JSONField(
                blank=True, default=dict, db_default=Value({}, models.JSONField()), editable=False
            ),
        ),
        migrations.AlterField(
            model_name="kyma",
            name="watcher_report",
            field=models.JSONField(blank=True, default=dict, db_default=Value({}, models.JSONField())),
        ),
        # Contract comes a release later: only Django's state forgets the columns (and the index of
        # next_reconcile_at), the database keeps them for the previous release's processes.
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveIndex(model_name="kyma", name="kyma_next_reconcile"),
                *[migrations.RemoveField(model_name="kyma", name=name) for name in OLD_FIELDS],
            ],
            database_operations=[],
        ),
    ]
