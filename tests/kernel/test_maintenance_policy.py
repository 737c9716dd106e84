"""Upstream's maintenance-window policy, resolved for a runtime (kernel.documents.maintenance)."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from kernel.documents.maintenance import PolicyError, Runtime, parse_policy

UTC = dt.UTC
# The shape of upstream's config/maintenance_windows/policy.json (values of our own).
POLICY = {
    "rules": [
        {
            "match": {"plan": "trial|free"},
            "windows": [{"days": ["Mon", "Wed"], "begin": "01:00:00+00:00", "end": "03:00:00+00:00"}],
        },
        {
            "match": {"region": "europe|eu-"},
            "windows": [{"days": ["Sat"], "begin": "21:00:00+00:00", "end": "00:00:00+00:00"}],
        },
        {
            "match": {"globalAccountId": "^ga-special$"},
            "windows": [{"begin": "2030-01-10T20:00:00Z", "end": "2030-01-11T00:00:00Z"}],
        },
    ],
    "default": {"days": ["Sun"], "begin": "10:00:00+02:00", "end": "12:00:00+02:00"},
}
# 2030-01-07 is a Monday.
MONDAY = dt.datetime(2030, 1, 7, 0, 30, tzinfo=UTC)


@pytest.fixture
def policy():
    return parse_policy(json.dumps(POLICY))


def test_given_a_trial_runtime_then_its_rule_gives_the_next_weekday_window(policy):
    window = policy.resolve(Runtime(plan="trial"), MONDAY)
    assert (window.begin, window.end) == (
        dt.datetime(2030, 1, 7, 1, tzinfo=UTC),
        dt.datetime(2030, 1, 7, 3, tzinfo=UTC),
    )


def test_given_a_runtime_inside_its_window_then_it_is_active_until_the_minimum_is_left(policy):
    runtime = Runtime(plan="free")
    inside = dt.datetime(2030, 1, 7, 1, 30, tzinfo=UTC)
    assert policy.active(runtime, inside, dt.timedelta(minutes=20)) is not None
    late = dt.datetime(2030, 1, 7, 2, 50, tzinfo=UTC)  # 10 minutes left, 20 needed
    assert policy.active(runtime, late, dt.timedelta(minutes=20)) is None
    assert policy.upcoming(runtime, late, dt.timedelta(minutes=20)).begin == dt.datetime(
        2030, 1, 9, 1, tzinfo=UTC
    )


def test_given_a_window_past_midnight_then_it_ends_the_next_day_and_is_active_after_midnight(policy):
    runtime = Runtime(region="europe-west")
    window = policy.resolve(runtime, MONDAY)
    assert window.begin == dt.datetime(2030, 1, 12, 21, tzinfo=UTC)
    assert window.end == dt.datetime(2030, 1, 13, 0, tzinfo=UTC)
    just_before_midnight = dt.datetime(2030, 1, 12, 23, 30, tzinfo=UTC)
    assert policy.active(runtime, just_before_midnight, dt.timedelta(minutes=20)) is not None


def test_given_an_absolute_window_and_a_key_in_another_case_then_it_matches(policy):
    runtime = Runtime(global_account_id="ga-special")
    window = policy.resolve(runtime, MONDAY)
    assert window.begin == dt.datetime(2030, 1, 10, 20, tzinfo=UTC)
    after = dt.datetime(2030, 2, 1, tzinfo=UTC)  # its only window is over: the default takes over
    assert policy.resolve(runtime, after).begin.weekday() == 6


def test_given_no_rule_matches_then_the_default_window_with_its_offset(policy):
    window = policy.resolve(Runtime(region="us-east"), MONDAY)
    assert window.begin == dt.datetime(2030, 1, 13, 8, tzinfo=UTC)  # 10:00+02:00


def test_given_an_empty_attribute_then_no_rule_matches_it(policy):
    assert policy.resolve(Runtime(), MONDAY).begin.weekday() == 6


def test_given_the_first_matching_rule_has_no_window_left_then_the_default_not_the_next_rule():
    over = {"begin": "2020-01-01T00:00:00Z", "end": "2020-01-02T00:00:00Z"}
    document = {
        "rules": [
            {"match": {"plan": "trial"}, "windows": [over]},
            {
                "match": {"plan": "trial"},
                "windows": [{"days": ["Tue"], "begin": "01:00:00Z", "end": "02:00:00Z"}],
            },
        ],
        "default": {"days": ["Fri"], "begin": "01:00:00Z", "end": "02:00:00Z"},
    }
    window = parse_policy(document).resolve(Runtime(plan="trial"), MONDAY)
    assert window.begin.weekday() == 4  # upstream stops at the first match


@pytest.mark.parametrize(
    ("document", "field"),
    [
        ({"rules": [{"match": {"plan": "("}, "windows": []}]}, "policy.rules[0].match.plan"),
        ({"rules": [{"match": {"tier": "x"}, "windows": []}]}, "policy.rules[0].match.tier"),
        (
            {"default": {"days": ["Sat"], "timeBegin": "20:00:00Z", "end": "21:00:00Z"}},
            "policy.default.timeBegin",
        ),
        (
            {"default": {"days": ["Saturday"], "begin": "20:00:00Z", "end": "21:00:00Z"}},
            "policy.default.days",
        ),
        ({"default": {"days": ["Sat"], "begin": "8pm", "end": "21:00:00Z"}}, "policy.default.begin"),
        (
            {"default": {"begin": "2030-01-01T00:00:00", "end": "2030-01-02T00:00:00Z"}},
            "policy.default.begin",
        ),
        ([], "policy"),
    ],
)
def test_given_a_wrong_policy_then_the_error_names_the_field(document, field):
    with pytest.raises(PolicyError) as failure:
        parse_policy(document)
    assert str(failure.value).startswith(field)


def test_given_text_that_is_not_json_then_a_policy_error():
    with pytest.raises(PolicyError, match="not JSON"):
        parse_policy("{rules")
