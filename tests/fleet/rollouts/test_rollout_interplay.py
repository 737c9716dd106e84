"""Rollouts meet maintenance windows and each other: a wave waits for its runtimes' windows and
says when they open; a runtime with no window to wait for (no policy, or none for it) fails the
gate and says why, rather than holding the wave for ever; only one rollout changes a runtime at a
time."""

from __future__ import annotations

import datetime as dt

import pytest
from django.urls import reverse
from django.utils import timezone

from fleet.models import MaintenancePolicy, Module, RolloutState, RolloutTarget, TargetState
from fleet.rollouts.engine import rollouts_advance
from fleet.rollouts.targets import KymaTargets
from fleet.services import modules as module_services
from kernel.timefmt import display
from pki import services as pki
from tests.fleet.rollouts.helpers import latest, make_fleet, new_version, states
from tests.support.runtimes import KLM, keda_module, klm_watcher
from watchers.services import watcher_apply

pytestmark = pytest.mark.django_db
ALL_DAYS = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]


def window(begin: dt.timedelta, end: dt.timedelta) -> dict:
    now = timezone.now()
    tod = lambda moment: moment.astimezone(dt.UTC).strftime("%H:%M:%S+00:00")  # noqa: E731
    return {"rules": [], "default": {"days": ALL_DAYS, "begin": tod(now + begin), "end": tod(now + end)}}


@pytest.fixture
def fleet(runtimes, settings):
    settings.ROLLOUT_POLICY = {
        "ModuleVersion": {"waves": [{"size": 1}, {"size": "100%"}], "gate": {"maxErrorRatio": 0}},
        "Watcher": {"strategy": "AllAtOnce"},
    }
    pki.ca_bootstrap()
    klm_watcher()
    keda = keda_module()
    keda.versions = [{"version": "1.1.0", "requiresDowntime": True}]
    module_services.module_save(module=keda)
    return make_fleet(runtimes, 3)


def test_given_a_version_that_requires_downtime_then_the_wave_waits_for_the_windows_and_says_so(fleet):
    MaintenancePolicy.objects.create(policy=window(dt.timedelta(hours=3), dt.timedelta(hours=4)))
    new_version("1.1.0")
    rollout = latest()
    fleet.settle(2)
    rollout.refresh_from_db()
    [canary] = [name for name, state in states(rollout).items() if state != TargetState.PENDING]
    target = RolloutTarget.objects.get(rollout=rollout, kyma__name=canary)
    assert target.state == TargetState.WAITING
    assert "waiting for the next maintenance window" in target.reason
    assert target.window_opens_at is not None
    assert rollout.state == RolloutState.PROGRESSING and rollout.current_wave == 0
    opens = f"the first opens {display(target.window_opens_at)}"
    assert f"1 waiting for their maintenance windows ({opens})" in rollout.message
    assert fleet.versions()[canary] == "1.0.0"
    rollouts_advance(timezone.now() + dt.timedelta(hours=2))  # waiting is not failing
    assert RolloutTarget.objects.get(pk=target.pk).state == TargetState.WAITING

    MaintenancePolicy.objects.update(policy=window(dt.timedelta(hours=-1), dt.timedelta(hours=2)))
    fleet.settle(3)
    rollout.refresh_from_db()
    assert rollout.state == RolloutState.COMPLETED
    assert set(fleet.versions().values()) == {"1.1.0"}


def test_the_rollout_page_says_when_a_waiting_runtimes_window_opens(fleet, admin_client):
    MaintenancePolicy.objects.create(policy=window(dt.timedelta(hours=3), dt.timedelta(hours=4)))
    new_version("1.1.0")
    rollout = latest()
    fleet.settle(2)
    target = RolloutTarget.objects.get(rollout=rollout, state=TargetState.WAITING)
    url = reverse("admin:controlplane_rollout_change", args=[rollout.pk])
    html = admin_client.get(url).content.decode()
    row = html[html.index('data-state="Waiting"') :]
    assert "window opens <time" in row and display(target.window_opens_at) in row
    assert f"the first opens {display(target.window_opens_at)}" in html  # the rollout's message


def halted_for(rollout, cause: str) -> RolloutTarget:
    """The wave's one released runtime failed the gate for ``cause``, and the rollout halted."""
    rollout.refresh_from_db()
    [target] = RolloutTarget.objects.filter(rollout=rollout).exclude(state=TargetState.PENDING)
    assert target.state == TargetState.FAILED and cause in target.reason
    assert rollout.state == RolloutState.HALTED and cause in rollout.halted_reason
    assert "waiting for their maintenance windows" not in rollout.message
    return target


def test_given_no_policy_then_a_runtime_whose_new_version_needs_a_window_fails_the_gate_and_says_why(fleet):
    new_version("1.1.0")
    rollout = latest()
    fleet.settle(2)
    target = halted_for(rollout, "no maintenance-window policy is configured")
    assert "cannot update keda from 1.0.0 to 1.1.0" in target.reason
    assert fleet.versions()[target.kyma.name] == "1.0.0"


def test_given_a_policy_with_no_window_for_the_runtime_then_it_fails_the_gate_and_says_why(fleet):
    windows = [window(dt.timedelta(hours=3), dt.timedelta(hours=4))["default"]]
    MaintenancePolicy.objects.create(policy={"rules": [{"match": {"plan": "trial"}, "windows": windows}]})
    new_version("1.1.0")
    rollout = latest()
    fleet.settle(2)
    halted_for(rollout, "the maintenance-window policy gives this runtime no window")


def test_given_the_policy_goes_while_a_runtime_waits_then_it_fails_the_gate_without_a_reconcile(fleet):
    MaintenancePolicy.objects.create(policy=window(dt.timedelta(hours=3), dt.timedelta(hours=4)))
    new_version("1.1.0")
    rollout = latest()
    fleet.settle(2)
    assert RolloutTarget.objects.filter(rollout=rollout, state=TargetState.WAITING).count() == 1
    MaintenancePolicy.objects.all().delete()
    rollouts_advance()  # the runtime is reconciled again only when its old window would open
    halted_for(rollout, "no maintenance-window policy is configured")


def test_given_a_runtime_another_rollout_is_changing_then_this_one_leaves_it_until_that_one_is_done(fleet):
    MaintenancePolicy.objects.create(policy=window(dt.timedelta(hours=-1), dt.timedelta(hours=2)))
    new_version("1.1.0")
    first = latest()
    [canary] = [name for name, state in states(first).items() if state != TargetState.PENDING]
    watcher_apply(**{**KLM, "name": "btp-watcher", "manager": "btp-manager"})
    second = latest()
    assert second.kind == "Watcher"
    target = RolloutTarget.objects.get(rollout=second, kyma__name=canary)
    assert target.state == TargetState.PENDING
    assert f"rollout {first.name} is changing this runtime now" in target.reason
    fleet.settle(3)  # the canary passes the first rollout's gate: the second takes it
    assert RolloutTarget.objects.get(pk=target.pk).state == TargetState.READY


def test_a_runtimes_held_targets_say_which_rollout_holds_what(fleet):
    new_version("1.1.0")
    rollout = latest()
    pending = next(name for name, state in states(rollout).items() if state == TargetState.PENDING)
    kyma = next(k for k in fleet.kymas if k.name == pending)
    targets = KymaTargets(kyma)
    assert targets.module_version(Module.objects.get(name="keda"), "regular") == "1.0.0"
    [held] = targets.held
    assert held.rollout_id == rollout.pk and held.value == "1.0.0" and not held.released and held.member


def test_a_runtime_that_takes_the_module_up_during_a_rollout_keeps_the_old_version_until_it_completes(
    fleet, runtimes
):
    from fleet.rollouts.selectors import kyma_holds
    from tests.fleet.rollouts.helpers import reconcile
    from tests.support.runtimes import connected_kyma

    MaintenancePolicy.objects.create(policy=window(dt.timedelta(hours=-1), dt.timedelta(hours=2)))
    new_version("1.1.0")
    rollout = latest()
    runtime = runtimes()
    late = connected_kyma(runtime, name="late")
    reconcile(late)
    from fleet.models import ModuleConfig

    assert ModuleConfig.objects.get(kyma=late).version == "1.0.0"
    [hold] = kyma_holds(late)
    assert hold.rollout == rollout and "took the module up after the rollout began" in hold.reason
    fleet.kymas.append(late)
    fleet.runtimes.append(runtime)
    fleet.settle(3)
    rollout.refresh_from_db()
    assert rollout.state == RolloutState.COMPLETED
    reconcile(late)
    assert ModuleConfig.objects.get(kyma=late).version == "1.1.0"
