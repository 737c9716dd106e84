"""A new module version goes out in waves: runtimes outside the current wave keep the old version
(in their ModuleConfig and their catalog mirror), a failed gate halts the rollout, and the
operator resumes, aborts or rolls back; a newer change supersedes the rollout cleanly."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from fleet.models import Kyma, Module, Rollout, RolloutEvent, RolloutState, RolloutTarget, TargetState
from fleet.rollouts import services as rollouts
from fleet.rollouts.engine import rollouts_advance
from fleet.services import kymas as kyma_services
from pki import services as pki
from tests.fleet.rollouts.helpers import latest, make_fleet, new_version, states
from tests.support.runtimes import keda_module, klm_watcher

pytestmark = pytest.mark.django_db

# Wave 1 one runtime, wave 2 half of them, wave 3 the rest; any failure halts.
POLICY = {"ModuleVersion": {"waves": [{"name": "canary", "size": 1}, {"size": "50%"}, {"size": "100%"}],
                            "gate": {"maxErrorRatio": 0, "timeoutSeconds": 600}}}  # fmt: skip


@pytest.fixture
def fleet(runtimes, settings):
    settings.ROLLOUT_POLICY = POLICY
    pki.ca_bootstrap()
    klm_watcher()
    keda_module()
    return make_fleet(runtimes, 4)


def by_wave(rollout: Rollout) -> dict[int, list[str]]:
    found: dict[int, list[str]] = {}
    for name, wave in RolloutTarget.objects.filter(rollout=rollout).values_list("kyma__name", "wave"):
        found.setdefault(wave, []).append(name)
    return {wave: sorted(names) for wave, names in sorted(found.items())}


def test_given_a_new_version_then_a_rollout_releases_only_the_canary(fleet):
    new_version("1.1.0")
    rollout = latest()
    assert rollout.kind == "ModuleVersion" and rollout.subject == "keda/regular"
    assert rollout.state == RolloutState.PROGRESSING and rollout.current_wave == 0
    waves = by_wave(rollout)
    assert [len(names) for names in waves.values()] == [1, 1, 2]
    fleet.reconcile_all()
    versions = fleet.versions()
    canary = waves[0][0]
    assert versions[canary] == "1.1.0"
    assert {name for name, version in versions.items() if version == "1.0.0"} == set(versions) - {canary}
    index = int(canary[1:])
    assert fleet.mirrored_version(index) == "1.1.0"  # its catalog mirror shows its own target
    assert fleet.mirrored_version((index + 1) % 4) == "1.0.0"


def test_given_every_wave_passes_then_the_rollout_completes_and_the_hold_goes(fleet):
    new_version("1.1.0")
    rollout = latest()
    for _ in range(4):
        fleet.settle(1)
    rollout.refresh_from_db()
    assert rollout.state == RolloutState.COMPLETED
    assert set(fleet.versions().values()) == {"1.1.0"}
    assert set(states(rollout).values()) == {TargetState.READY}
    assert Module.objects.get(name="keda").rollout_holds == {}
    kinds = list(
        RolloutEvent.objects.filter(rollout=rollout).order_by("at", "pk").values_list("kind", flat=True)
    )
    assert kinds[0] == "created" and kinds[-1] == "completed"
    assert kinds.count("gate-passed") == 3


def test_given_the_new_version_fails_in_a_runtime_then_the_gate_halts_the_rollout(fleet):
    new_version("1.1.0")
    rollout = latest()
    failing = by_wave(rollout)[1][0]
    fleet.answers[failing] = {"1.1.0": "Error"}
    for _ in range(3):
        fleet.settle(1)
    rollout.refresh_from_db()
    assert rollout.state == RolloutState.HALTED and rollout.current_wave == 1
    assert failing in rollout.halted_reason and "1 of 1 runtime(s) failed" in rollout.halted_reason
    last_wave = by_wave(rollout)[2]
    assert all(fleet.versions()[name] == "1.0.0" for name in last_wave)  # never reached
    assert {states(rollout)[name] for name in last_wave} == {TargetState.PENDING}


def test_given_a_halted_rollout_when_resumed_then_the_next_wave_goes(fleet):
    new_version("1.1.0")
    rollout = latest()
    fleet.answers[by_wave(rollout)[1][0]] = {"1.1.0": "Error"}
    for _ in range(3):
        fleet.settle(1)
    rollouts.rollout_resume(rollout=Rollout.objects.get(pk=rollout.pk))
    rollout.refresh_from_db()
    assert rollout.state == RolloutState.PROGRESSING and rollout.current_wave == 2
    fleet.settle(2)
    rollout.refresh_from_db()
    assert rollout.state == RolloutState.COMPLETED
    passed = RolloutEvent.objects.get(rollout=rollout, kind="gate-passed", wave=1)
    assert "failures accepted by the operator" in passed.text


def test_given_a_halted_rollout_when_rolled_back_then_changed_runtimes_get_the_old_version(fleet):
    new_version("1.1.0")
    rollout = latest()
    fleet.answers[by_wave(rollout)[1][0]] = {"1.1.0": "Error"}
    for _ in range(3):
        fleet.settle(1)
    rollouts.rollout_rollback(rollout=rollout)
    fleet.settle(1)
    rollout.refresh_from_db()
    assert rollout.state == RolloutState.ROLLED_BACK
    assert set(fleet.versions().values()) == {"1.0.0"}
    assert [fleet.mirrored_version(i) for i in range(4)] == ["1.0.0"] * 4
    changed = by_wave(rollout)[0] + by_wave(rollout)[1]
    assert {states(rollout)[name] for name in changed} == {TargetState.ROLLED_BACK}


def test_given_an_aborted_rollout_then_changed_runtimes_keep_the_new_version_and_the_others_the_old(fleet):
    new_version("1.1.0")
    rollout = latest()
    fleet.settle(1)
    rollouts.rollout_abort(rollout=rollout)
    fleet.settle(2)
    rollout.refresh_from_db()
    assert rollout.state == RolloutState.ABORTED
    waves = by_wave(rollout)
    versions = fleet.versions()
    assert versions[waves[0][0]] == "1.1.0"
    assert {versions[name] for name in waves[2]} == {"1.0.0"}


def test_given_a_paused_rollout_then_no_wave_starts_until_it_is_resumed(fleet):
    new_version("1.1.0")
    rollout = latest()
    rollouts.rollout_pause(rollout=rollout)
    fleet.settle(2)
    rollout.refresh_from_db()
    assert rollout.state == RolloutState.PAUSED and rollout.current_wave == 0
    rollouts.rollout_resume(rollout=rollout)
    fleet.settle(3)
    rollout.refresh_from_db()
    assert rollout.state == RolloutState.COMPLETED


def test_given_a_newer_version_during_a_rollout_then_it_supersedes_it_and_no_runtime_goes_back(fleet):
    new_version("1.1.0")
    first = latest()
    fleet.settle(1)  # the canary passed, wave 2 released
    fleet.reconcile_all()
    had = fleet.versions()
    new_version("1.2.0")
    second = latest()
    first.refresh_from_db()
    assert first.state == RolloutState.SUPERSEDED and first.superseded_by_id == second.pk
    fleet.reconcile_all()
    now = fleet.versions()
    released = {name for name, state in states(second).items() if state != TargetState.PENDING}
    for name, version in now.items():
        assert version == ("1.2.0" if name in released else had[name])  # never back to 1.0.0
    from_values = dict(RolloutTarget.objects.filter(rollout=second).values_list("kyma__name", "from_value"))
    assert {from_values[name]["value"] for name in had} == set(had.values())
    for _ in range(4):
        fleet.settle(1)
    second.refresh_from_db()
    assert second.state == RolloutState.COMPLETED and set(fleet.versions().values()) == {"1.2.0"}


def test_given_a_runtime_not_ready_within_the_limit_then_it_fails_the_gate(fleet, settings):
    settings.ROLLOUT_POLICY = {
        "ModuleVersion": {**POLICY["ModuleVersion"], "gate": {"timeoutSeconds": 60, "maxErrorRatio": 0}}
    }
    new_version("1.1.0")
    rollout = latest()
    fleet.reconcile_all()  # the manager never reports: keda stays Processing at 1.1.0
    rollouts_advance(timezone.now() + dt.timedelta(seconds=120))
    rollout.refresh_from_db()
    assert rollout.state == RolloutState.HALTED
    assert "not Ready within 60 s" in rollout.halted_reason


def test_given_a_runtime_that_was_not_ready_before_then_it_is_changed_but_not_counted(fleet):
    new_version("1.1.0")
    rollout = latest()
    broken = Kyma.objects.get(name=by_wave(rollout)[1][0])
    broken.modules = [*broken.modules, {"name": "ghost"}]  # not in the catalog: Error
    kyma_services.kyma_save(kyma=broken)
    fleet.answers[broken.name] = {"1.1.0": "Error"}
    fleet.settle(2)
    target = RolloutTarget.objects.get(rollout=rollout, kyma=broken)
    assert target.state == TargetState.EXCLUDED and "was Error before the change" in target.reason
    assert fleet.versions()[broken.name] == "1.1.0"  # changed all the same
    rollout.refresh_from_db()
    assert rollout.state in (RolloutState.PROGRESSING, RolloutState.COMPLETED)  # not halted: not counted


def test_given_a_single_runtime_then_the_new_version_reaches_it_without_a_rollout(runtimes, settings):
    settings.ROLLOUT_POLICY = POLICY
    pki.ca_bootstrap()
    klm_watcher()
    keda_module()
    fleet = make_fleet(runtimes, 1)
    new_version("1.1.0")
    assert Rollout.objects.count() == 0
    fleet.reconcile_all()
    assert fleet.versions() == {"k0": "1.1.0"}
