"""Maintenance windows in the reconcile, as upstream has them: a module version that requires
downtime reaches a runtime that runs the module already only inside its window, unless the Kyma
skips windows; a first installation never waits; without a window to wait for (no policy, or none
for this runtime) the module is in Error and says why, as upstream: it is not waiting."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from django.utils import timezone

from fleet.models import MaintenancePolicy, ModuleConfig
from fleet.services import kymas as kyma_services
from fleet.services import modules as module_services
from pki import services as pki
from tests.reconciler.helpers import reconcile
from tests.support.runtimes import connected_kyma, keda_module, klm_watcher

pytestmark = pytest.mark.django_db
ALL_DAYS = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]


def time_of_day(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).strftime("%H:%M:%S+00:00")


def policy_with_window(begin: dt.timedelta, end: dt.timedelta) -> dict:
    """Every day, from now + ``begin`` to now + ``end`` (times of day)."""
    now = timezone.now()
    window = {"days": ALL_DAYS, "begin": time_of_day(now + begin), "end": time_of_day(now + end)}
    return {"rules": [{"match": {"plan": "trial"}, "windows": [window]}], "default": window}


def store_policy(document: dict) -> None:
    MaintenancePolicy.objects.update_or_create(name="default", defaults={"policy": document})


OPEN = (dt.timedelta(hours=-1), dt.timedelta(hours=2))
CLOSED = (dt.timedelta(hours=3), dt.timedelta(hours=4))


@pytest.fixture
def installed(runtimes):
    """A Kyma running keda 1.0.0 (regular), reported Ready; keda 1.1.0 requires downtime."""
    pki.ca_bootstrap()
    klm_watcher()
    keda = keda_module()
    keda.versions = [{"version": "1.1.0", "requiresDowntime": True}]
    module_services.module_save(module=keda)
    kyma = connected_kyma(runtimes(), labels={"kyma-project.io/broker-plan-name": "trial"})
    reconcile(kyma)
    module_services.moduleconfig_set_status(
        config=ModuleConfig.objects.get(kyma=kyma), status={"state": "Ready"}
    )
    reconcile(kyma)
    assert ModuleConfig.objects.get(kyma=kyma).version == "1.0.0"
    return kyma, keda


def upgrade(keda) -> None:
    keda.refresh_from_db()
    keda.channels = {**keda.channels, "regular": "1.1.0"}
    module_services.module_save(module=keda)


def keda_status(kyma) -> dict:
    return next(m for m in kyma.module_status if m["name"] == "keda")


def test_given_a_closed_window_then_the_installed_version_stays_and_the_module_says_why(installed):
    kyma, keda = installed
    store_policy(policy_with_window(*CLOSED))
    upgrade(keda)
    reconcile(kyma)
    assert ModuleConfig.objects.get(kyma=kyma).version == "1.0.0"
    status = keda_status(kyma)
    assert status["version"] == "1.0.0" and status["maintenance"] is True
    assert status["state"] == "Ready"
    assert "waiting for the next maintenance window to update keda from 1.0.0 to 1.1.0" in status["message"]
    opens = timezone.now() + CLOSED[0]
    assert kyma.next_reconcile_at <= opens + dt.timedelta(seconds=5)  # reconciled as it opens


def test_given_an_open_window_then_the_new_version_goes_to_the_manager(installed):
    kyma, keda = installed
    store_policy(policy_with_window(*OPEN))
    upgrade(keda)
    reconcile(kyma)
    config = ModuleConfig.objects.get(kyma=kyma)
    assert config.version == "1.1.0"
    assert config.status == {}  # the manager's report was about 1.0.0
    status = keda_status(kyma)
    assert status["version"] == "1.1.0" and "maintenance" not in status
    assert status["state"] == "Processing"


def test_given_the_kyma_skips_windows_then_it_is_upgraded_at_once(installed):
    kyma, keda = installed
    store_policy(policy_with_window(*CLOSED))
    kyma.skip_maintenance_windows = True
    kyma_services.kyma_save(kyma=kyma)
    upgrade(keda)
    reconcile(kyma)
    assert ModuleConfig.objects.get(kyma=kyma).version == "1.1.0"


def test_given_a_version_without_downtime_then_it_never_waits(installed):
    kyma, keda = installed
    store_policy(policy_with_window(*CLOSED))
    keda.refresh_from_db()
    keda.versions = []
    module_services.module_save(module=keda)
    upgrade(keda)
    reconcile(kyma)
    assert ModuleConfig.objects.get(kyma=kyma).version == "1.1.0"


def test_given_a_first_installation_then_it_never_waits(runtimes):
    pki.ca_bootstrap()
    klm_watcher()
    keda = keda_module()
    keda.channels = {"regular": "1.1.0"}
    keda.versions = [{"version": "1.1.0", "requiresDowntime": True}]
    module_services.module_save(module=keda)
    store_policy(policy_with_window(*CLOSED))
    kyma = connected_kyma(runtimes())
    reconcile(kyma)
    assert ModuleConfig.objects.get(kyma=kyma).version == "1.1.0"
    assert "maintenance" not in keda_status(kyma)


def test_given_no_policy_then_the_module_cannot_be_updated_and_says_so(installed):
    kyma, keda = installed
    upgrade(keda)
    reconcile(kyma)
    assert ModuleConfig.objects.get(kyma=kyma).version == "1.0.0"
    status = keda_status(kyma)
    assert status["state"] == "Error"
    assert "no maintenance-window policy is configured" in status["message"]
    assert "maintenance" not in status  # upstream: a window it cannot know is an error, not a wait
    assert kyma.state == "Error"


def test_given_a_policy_with_no_window_for_the_runtime_then_the_module_cannot_be_updated_and_says_so(
    installed,
):
    kyma, keda = installed
    window = policy_with_window(*OPEN)["default"]
    store_policy({"rules": [{"match": {"plan": "azure"}, "windows": [window]}]})  # none for trial
    upgrade(keda)
    reconcile(kyma)
    assert ModuleConfig.objects.get(kyma=kyma).version == "1.0.0"
    status = keda_status(kyma)
    assert status["state"] == "Error" and "maintenance" not in status
    assert "the maintenance-window policy gives this runtime no window" in status["message"]


def test_given_the_policy_in_a_file_then_it_is_used_while_the_admin_has_none(installed, settings, tmp_path):
    kyma, keda = installed
    path = tmp_path / "policy.json"
    path.write_text(json.dumps(policy_with_window(*OPEN)))
    settings.MAINTENANCE_POLICY_FILE = str(path)
    upgrade(keda)
    reconcile(kyma)
    assert ModuleConfig.objects.get(kyma=kyma).version == "1.1.0"


def test_given_the_admins_policy_then_it_wins_over_the_file(installed, settings, tmp_path):
    kyma, keda = installed
    path = tmp_path / "policy.json"
    path.write_text(json.dumps(policy_with_window(*OPEN)))
    settings.MAINTENANCE_POLICY_FILE = str(path)
    store_policy(policy_with_window(*CLOSED))
    upgrade(keda)
    reconcile(kyma)
    assert ModuleConfig.objects.get(kyma=kyma).version == "1.0.0"
