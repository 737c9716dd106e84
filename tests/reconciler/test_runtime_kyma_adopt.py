"""Adopting the runtime's Kyma spec: an invalid spec is refused (the Kyma says why), but a database
failure while storing a valid one is not a "rejected spec": it fails the reconcile, which the
task retries with backoff."""

from __future__ import annotations

import pytest
from django.db import OperationalError, connection
from django.utils import timezone

from fleet.k8s.client import client_for
from fleet.services import kymas as kyma_services
from pki import services as pki
from reconciler import runtime_kyma
from reconciler.context import ReconcileContext
from reconciler.run import kyma_reconcile_run
from runtime_emulator import crd_manifest
from tests.reconciler.helpers import conditions, reconcile
from tests.support.runtimes import connected_kyma, keda_module, klm_watcher

pytestmark = pytest.mark.django_db

# A real failure of the database on the UPDATE that stores a changed channel (no code of ours
# is replaced): SQLite finds no table behind the trigger, PostgreSQL reports an admin shutdown.
BROKEN_CHANNEL_UPDATE = {
    "sqlite": [
        (
            "CREATE TRIGGER broken_channel_update BEFORE UPDATE OF channel ON controlplane_kyma "
            "WHEN NEW.channel <> OLD.channel BEGIN INSERT INTO table_lost_in_an_outage VALUES (1); END"
        )
    ],
    "postgresql": [
        (
            "CREATE FUNCTION broken_channel_update() RETURNS trigger AS $$ BEGIN "
            "RAISE EXCEPTION 'terminating connection due to administrator command' USING ERRCODE = '57P01'; "
            "END $$ LANGUAGE plpgsql"
        ),
        (
            "CREATE TRIGGER broken_channel_update BEFORE UPDATE OF channel ON controlplane_kyma "
            "FOR EACH ROW WHEN (NEW.channel <> OLD.channel) EXECUTE FUNCTION broken_channel_update()"
        ),
    ],
}


@pytest.fixture(autouse=True)
def catalog():
    pki.ca_bootstrap()
    klm_watcher()
    return keda_module()


@pytest.fixture
def database_fails_on_channel_change() -> None:
    """Rolled back with the test's transaction (DDL is transactional in both databases)."""
    with connection.cursor() as cursor:
        for statement in BROKEN_CHANNEL_UPDATE[connection.vendor]:
            cursor.execute(statement)


def test_given_an_invalid_spec_in_the_runtime_when_reconciled_then_refused_and_the_record_says_why(runtimes):
    runtime = runtimes()
    kyma = connected_kyma(runtime)
    reconcile(kyma)
    # Our CRD refuses channel "none" (as a real API server enforces it); only a Kyma CRD that is
    # not ours (reinstalled by someone else meanwhile) lets a user store it.
    runtime.register_crd(crd_manifest("operator.kyma-project.io", "Kyma", versions=("v1beta2",)))
    runtime.edit_as_user("Kyma", "default", lambda obj: obj["spec"].update(channel="none"), "kyma-system")
    record = reconcile(kyma)
    assert kyma.channel == "regular" and kyma.generation == 1
    assert "runtime Kyma spec rejected: channel: 'none' is reserved" in record.message, record.message


def test_given_the_database_fails_while_adopting_a_valid_spec_then_the_reconcile_fails_not_rejected(
    runtimes, database_fails_on_channel_change
):
    runtime = runtimes()
    kyma = connected_kyma(runtime)
    reconcile(kyma)
    runtime.edit_as_user("Kyma", "default", lambda obj: obj["spec"].update(channel="fast"), "kyma-system")
    with pytest.raises(OperationalError):
        kyma_reconcile_run(kyma.pk)
    kyma.refresh_from_db()
    assert kyma.channel == "regular"
    assert conditions(kyma).get("Modules", ("", ""))[1] != "InvalidRuntimeSpec"


def test_given_a_user_edit_after_the_kyma_was_read_when_the_control_plane_pushes_then_the_edit_is_adopted(
    runtimes,
):
    runtime = runtimes()
    kyma = connected_kyma(runtime)
    reconcile(kyma)
    kyma.channel = "fast"  # the control plane's spec changes: a push is due
    kyma_services.kyma_save(kyma=kyma, reconcile=False)
    ctx = ReconcileContext(kyma=kyma, now=timezone.now(), client=client_for(kyma.pk, kyma.kubeconfig))
    # The reconcile has read the runtime's Kyma (as the events' reads and its prefetch keep it)...
    key = (runtime_kyma.API_VERSION, "Kyma", runtime_kyma.NAMESPACE, runtime_kyma.NAME)
    ctx.listed[key] = ctx.client.get(runtime_kyma.API_VERSION, "Kyma", "default", "kyma-system")
    # ...when a user changes it in the runtime, before the push.
    runtime.edit_as_user(
        "Kyma", "default", lambda obj: obj["spec"].update(channel="experimental"), "kyma-system"
    )

    runtime_kyma.step(ctx)

    kyma.refresh_from_db()
    assert runtime.get_object("Kyma", "default", "kyma-system")["spec"]["channel"] == "experimental"
    assert kyma.channel == "experimental"  # adopted, as a change a moment earlier would have been
