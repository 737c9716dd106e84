"""The demo shows a rollout of keda's version in waves once every demo runtime is Ready."""

from __future__ import annotations

import io

import pytest

from demo.management.commands.demo import KEDA_ROLLOUT_POLICY, Command, all_ready, ensure_catalog
from fleet.models import Kyma, Module, Rollout
from tests.factories import KymaFactory

pytestmark = pytest.mark.django_db


def _parse(*argv: str) -> dict:
    return vars(Command().create_parser("manage.py", "demo").parse_args(list(argv)))


def test_the_demo_rolls_keda_out_after_its_runtimes_are_ready_by_default():
    assert _parse()["rollout_after"] == 30
    assert _parse("--rollout-after", "0")["rollout_after"] == 0


def test_the_demo_rollout_goes_one_runtime_per_wave_and_only_once():
    ensure_catalog()
    keda = Module.objects.get(name="keda")
    assert keda.channels["regular"] == "2.14.0" and keda.rollout_policy == KEDA_ROLLOUT_POLICY
    kymas = [KymaFactory(name=f"demo-{n}", modules=[{"name": "keda"}], state="Ready") for n in range(1, 4)]
    assert all_ready(kymas)
    command = Command(stdout=io.StringIO())
    command.start_rollout()
    rollout = Rollout.objects.get()
    assert rollout.subject == "keda/regular" and rollout.to_value == {"value": "2.15.0"}
    assert [wave.get("name") for wave in rollout.waves] == ["canary", "next", "rest"]
    assert rollout.runtimes == 3 and rollout.gate["bakeSeconds"] == 20
    assert "goes out in waves: rollout keda-regular-2.15.0" in command.stdout.getvalue()
    command.start_rollout()  # a restarted demo does not repeat it
    assert Rollout.objects.count() == 1


def test_the_demo_waits_for_every_runtime_to_be_ready():
    kymas = [KymaFactory(state="Ready"), KymaFactory(state="Processing")]
    assert not all_ready(kymas)
    Kyma.objects.update(state="Ready")
    assert all_ready(kymas)
