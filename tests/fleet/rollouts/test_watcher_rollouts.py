"""A Watcher change and new runtime-watcher settings go out in waves too: runtimes outside the
current wave keep the webhook entry (or the watcher image) they had."""

from __future__ import annotations

import pytest

from fleet.models import Rollout, RolloutState, RuntimeWatcherSettings, TargetState
from pki import services as pki
from tests.fleet.rollouts.helpers import latest, make_fleet, reconcile, states
from tests.support.runtimes import KLM, keda_module, klm_watcher
from watchers.models import Watcher
from watchers.services import watcher_apply, watcher_delete

pytestmark = pytest.mark.django_db
POLICY = {"waves": [{"name": "canary", "size": 1}, {"size": "100%"}], "gate": {"maxErrorRatio": 0}}
OTHER = {**KLM, "name": "btp-watcher", "manager": "btp-manager"}
WEBHOOK = "kcp-system.btp-watcher.operator.kyma-project.io"


@pytest.fixture
def fleet(runtimes, settings):
    settings.ROLLOUT_POLICY = {"Watcher": POLICY, "RuntimeWatcher": POLICY}
    pki.ca_bootstrap()
    klm_watcher()
    keda_module()
    return make_fleet(runtimes, 3)


def webhooks(fleet, index: int) -> dict[str, dict]:
    vwc = fleet.runtimes[index].get_object("validatingwebhookconfigurations", "skr-webhook")
    return {hook["name"]: hook for hook in vwc["webhooks"]}


def image(fleet, index: int) -> str:
    deployment = fleet.runtimes[index].get_object("deployments", "skr-webhook", "kyma-system")
    return deployment["spec"]["template"]["spec"]["containers"][0]["image"]


def canary_index(rollout: Rollout) -> int:
    [name] = [name for name, state in states(rollout).items() if state != TargetState.PENDING]
    return int(name[1:])


def test_given_a_new_watcher_then_only_the_canarys_runtime_gets_its_webhook_first(fleet):
    watcher_apply(**OTHER)
    rollout = latest()
    assert rollout.kind == "Watcher" and rollout.subject == "kcp-system/btp-watcher"
    fleet.reconcile_all()
    canary = canary_index(rollout)
    assert [WEBHOOK in webhooks(fleet, i) for i in range(3)] == [i == canary for i in range(3)]
    for _ in range(3):
        fleet.settle(1)
    rollout.refresh_from_db()
    assert rollout.state == RolloutState.COMPLETED
    assert all(WEBHOOK in webhooks(fleet, i) for i in range(3))
    assert Watcher.objects.get(name="btp-watcher").rollout_hold is None


def test_given_a_changed_watcher_then_runtimes_outside_the_wave_keep_its_old_entry(fleet):
    watcher_apply(**{**KLM, "labels_to_watch": {"operator.kyma-project.io/watched-by": "klm"}})
    rollout = latest()
    fleet.reconcile_all()
    canary = canary_index(rollout)
    klm = "kcp-system.klm-watcher.operator.kyma-project.io"
    selectors = [webhooks(fleet, i)[klm]["objectSelector"]["matchLabels"] for i in range(3)]
    for index, selector in enumerate(selectors):
        expected = "klm" if index == canary else "kyma"
        assert selector == {"operator.kyma-project.io/watched-by": expected}


def test_given_a_watcher_deleted_during_its_rollout_then_the_rollout_ends(fleet):
    watcher_apply(**OTHER)
    rollout = latest()
    watcher_delete(watcher=Watcher.objects.get(name="btp-watcher"))
    rollout.refresh_from_db()
    assert rollout.state == RolloutState.SUPERSEDED and "deleted" in rollout.message


def test_given_new_runtime_watcher_settings_then_they_go_out_in_waves(fleet, settings):
    old = image(fleet, 0)
    settings.WATCHER_IMAGE = "ghcr.io/kyma-fleet/runtime-watcher:0.2.0"
    reconcile(fleet.kymas[0])  # the first process with the new settings records them
    rollout = latest()
    assert rollout.kind == "RuntimeWatcher"
    fleet.reconcile_all()
    canary = canary_index(rollout)
    assert [image(fleet, i) for i in range(3)] == [
        settings.WATCHER_IMAGE if i == canary else old for i in range(3)
    ]
    for _ in range(3):
        fleet.settle(1)
    rollout.refresh_from_db()
    assert rollout.state == RolloutState.COMPLETED
    assert {image(fleet, i) for i in range(3)} == {settings.WATCHER_IMAGE}
    assert RuntimeWatcherSettings.objects.get(is_default=True).settings["image"] == settings.WATCHER_IMAGE


def test_given_a_rolled_back_settings_rollout_then_every_runtime_has_the_old_image(fleet, settings):
    from fleet.rollouts.services import rollout_rollback

    old = image(fleet, 0)
    settings.WATCHER_IMAGE = "ghcr.io/kyma-fleet/runtime-watcher:0.2.0"
    reconcile(fleet.kymas[0])
    rollout = latest()
    fleet.settle(1)
    rollout_rollback(rollout=Rollout.objects.get(pk=rollout.pk))
    fleet.reconcile_all()
    assert {image(fleet, i) for i in range(3)} == {old}  # whatever this process's settings say
