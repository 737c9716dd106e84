"""Which runtime goes in which wave, and which plans are valid."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from fleet.models.rollout import DEFAULT_WAVES, effective_policy, plan_waves, validate_policy, validate_waves
from fleet.rollouts.planning import Member, assign


def members(count: int, **labels: str) -> list[Member]:
    return [Member(index, f"uid-{index}", dict(labels), None) for index in range(count)]


def sizes(wave_of: list[int], waves: int) -> list[int]:
    return [wave_of.count(index) for index in range(waves)]


def test_the_default_plan_is_a_canary_then_five_then_twenty_five_then_every_percent():
    assert sizes(assign("r", DEFAULT_WAVES, members(1000)), 4) == [1, 49, 200, 750]
    assert sizes(assign("r", DEFAULT_WAVES, members(100)), 4) == [1, 4, 20, 75]


def test_given_a_small_fleet_then_empty_waves_stay_empty():
    assert sizes(assign("r", DEFAULT_WAVES, members(3)), 4) == [1, 0, 0, 2]


def test_the_order_is_stable_for_a_rollout_and_differs_between_rollouts():
    fleet = members(50)
    first = assign("keda-regular-1.1.0", DEFAULT_WAVES, fleet)
    assert first == assign("keda-regular-1.1.0", DEFAULT_WAVES, fleet)
    canary = first.index(0)
    other = [assign(f"other-{n}", DEFAULT_WAVES, fleet).index(0) for n in range(5)]
    assert any(index != canary for index in other)


def test_given_a_selector_then_the_wave_takes_only_runtimes_it_selects():
    fleet = members(10, region="us") + [Member(100 + i, f"eu-{i}", {"region": "eu"}, None) for i in range(3)]
    waves = [{"size": 2, "selector": {"matchLabels": {"region": "eu"}}}, {"size": "100%"}]
    wave_of = assign("r", waves, fleet)
    assert {fleet[i].labels["region"] for i, wave in enumerate(wave_of) if wave == 0} == {"eu"}
    assert sizes(wave_of, 2) == [2, 11]


def test_given_counts_then_each_wave_adds_that_many():
    assert sizes(assign("r", [{"size": 2}, {"size": 3}, {"size": "100%"}], members(10)), 3) == [2, 3, 5]


@pytest.mark.parametrize(
    ("waves", "message"),
    [
        ([{"size": 1}], "the last wave must be size 100%"),
        ([{"size": "50%"}, {"size": "100%", "selector": {"matchLabels": {"a": "b"}}}], "the last wave"),
        ([{"size": "50%"}, {"size": "20%"}, {"size": "100%"}], "below an earlier wave"),
        ([{"size": "0%"}, {"size": "100%"}], "waves[0].size"),
        ([], "waves"),
    ],
)
def test_given_a_wrong_plan_then_it_is_refused_with_where(waves, message):
    with pytest.raises(ValidationError) as failure:
        validate_waves(waves)
    assert message in " ".join(failure.value.messages)


def test_the_setting_and_a_modules_override_layer_over_the_defaults(settings):
    settings.ROLLOUT_POLICY = {"ModuleVersion": {"gate": {"timeoutSeconds": 60}}}
    policy = effective_policy("ModuleVersion", {"gate": {"bakeSeconds": 5}, "allAtOnceBelow": 10})
    assert policy["gate"] == {"timeoutSeconds": 60, "maxErrorRatio": 0.02, "bakeSeconds": 5}
    assert plan_waves(policy, 9) == [{"name": "all", "size": "100%"}]
    assert plan_waves(policy, 10) == DEFAULT_WAVES
    assert plan_waves({**policy, "strategy": "AllAtOnce"}, 500) == [{"name": "all", "size": "100%"}]


def test_given_a_policy_with_an_unknown_field_then_it_is_refused():
    with pytest.raises(ValidationError):
        validate_policy({"waves": DEFAULT_WAVES, "speed": "fast"})
