"""On PostgreSQL, a ModuleConfig's revision is stamped when its transaction commits.

A writer marks the row (``revision = -1``, and ``created_revision = -1`` when it created it); a
deferred constraint trigger then takes the next value of the revision counter, stamps the row and
announces it (``pg_notify``) as part of COMMIT. The counter's row lock is held from there to the
end of the commit only, inside the server: no client round trip, no wait for a busy client
process, while every other ModuleConfig change of the fleet queues on it. Commit order is still
revision order (the next writer's trigger waits for that lock). Other databases keep stamping
from Python (``fleet.services.revisions``).
"""

from django.db import migrations

FUNCTION = "controlplane_moduleconfig_stamp"
TRIGGER = "controlplane_moduleconfig_stamp"

CREATE = f"""
CREATE OR REPLACE FUNCTION {FUNCTION}() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  next_value bigint;
BEGIN
  -- Several marks of one row in one transaction queue several events: the first stamps it.
  PERFORM 1 FROM controlplane_moduleconfig WHERE id = NEW.id AND revision < 0;
  IF NOT FOUND THEN
    RETURN NULL;
  END IF;
  INSERT INTO controlplane_revisioncounter (name, value) VALUES (TG_ARGV[0], 1)
    ON CONFLICT (name) DO UPDATE SET value = controlplane_revisioncounter.value + 1
    RETURNING value INTO next_value;
  UPDATE controlplane_moduleconfig
     SET revision = next_value,
         created_revision = CASE WHEN created_revision < 0 THEN next_value ELSE created_revision END
   WHERE id = NEW.id;
  PERFORM pg_notify(TG_ARGV[1], next_value::text);
  RETURN NULL;
END
$$;
CREATE CONSTRAINT TRIGGER {TRIGGER}
  AFTER INSERT OR UPDATE OF revision ON controlplane_moduleconfig
  DEFERRABLE INITIALLY DEFERRED
  FOR EACH ROW WHEN (NEW.revision < 0)
  EXECUTE FUNCTION {FUNCTION}('moduleconfig', 'controlplane_moduleconfig');
"""

DROP = f"""
DROP TRIGGER IF EXISTS {TRIGGER} ON controlplane_moduleconfig;
DROP FUNCTION IF EXISTS {FUNCTION}();
"""


def create(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(CREATE)


def drop(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP)


class Migration(migrations.Migration):
    dependencies = [
        ("controlplane", "0013_reconcile_spaced_until"),
    ]

    operations = [
        migrations.RunPython(create, drop),
    ]
