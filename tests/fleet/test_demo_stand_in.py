"""The demo's stand-in module manager answers only modules without a manager of their own: a
module whose team created a credential (the tutorial's serverless) keeps what its manager reports."""

from __future__ import annotations

import pytest

from demo.management.commands.demo import report_modules_ready
from fleet.models import ModuleConfig
from fleet.services import modules as module_services
from fleet.services.credentials import module_credential_create, module_credential_revoke
from tests.factories import KymaFactory, ModuleFactory

pytestmark = pytest.mark.django_db


def _config(kyma, module) -> ModuleConfig:
    config, _ = module_services.moduleconfig_upsert(
        kyma=kyma, module=module, spec={}, source_generation=1, source_resource_version=""
    )
    return config


def test_a_module_with_a_live_credential_keeps_the_state_its_manager_reports():
    kyma = KymaFactory(name="demo-1")
    serverless, other, keda = (
        ModuleFactory(name="serverless"),
        ModuleFactory(name="other"),
        ModuleFactory(name="keda"),
    )
    configs = {m.name: _config(kyma, m) for m in (serverless, other, keda)}
    module_credential_create(module=serverless, name="serverless-manager")
    module_services.moduleconfig_set_status(config=configs["serverless"], status={"state": "Error"})

    reported = report_modules_ready([kyma])

    assert reported == ["other of demo-1"]
    configs["serverless"].refresh_from_db()
    assert configs["serverless"].status["state"] == "Error"
    configs["keda"].refresh_from_db()
    assert (configs["keda"].status or {}).get("state") != "Ready"  # the SDK example's, even before it runs


def test_a_module_whose_credentials_are_all_revoked_is_answered_by_the_stand_in_again():
    kyma = KymaFactory(name="demo-1")
    serverless = ModuleFactory(name="serverless")
    _config(kyma, serverless)
    credential, _ = module_credential_create(module=serverless, name="serverless-manager")
    module_credential_revoke(credential=credential)

    assert report_modules_ready([kyma]) == ["serverless of demo-1"]
