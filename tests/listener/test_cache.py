"""The listener's look-up caches: refreshed ahead of use, never older than LISTENER_CACHE_SECONDS."""

from __future__ import annotations

import pytest
from django.db import DatabaseError

from fleet.models import Kyma
from listener import services
from listener.cache import KEPT_FOR, Refresher, TTLCache
from tests.factories import KymaFactory
from tests.support.clock import Clock

pytestmark = pytest.mark.django_db


@pytest.fixture
def clock(settings):
    settings.LISTENER_CACHE_SECONDS = 2.0
    return Clock()


def by_runtime(clock: Clock) -> TTLCache:
    return TTLCache(
        lambda runtime_id: services._kymas_by_runtime([runtime_id]).get(runtime_id),
        services._kymas_by_runtime,
        clock=clock,
    )


def test_given_an_entry_in_use_when_refreshed_ahead_then_a_later_event_reads_no_database(
    clock, django_assert_num_queries
):
    kyma = KymaFactory(runtime_id="rt-quiet", skr_domain="old.example.com")
    cache = by_runtime(clock)
    assert cache.get("rt-quiet").skr_domain == "old.example.com"
    Kyma.objects.filter(pk=kyma.pk).update(skr_domain="new.example.com")

    clock.now += 1.5  # the refresher's round, before the entry expires
    assert cache.refresh_due(within=1.0) == 1
    clock.now += 1.5  # past the first load's expiry: the refreshed entry answers
    with django_assert_num_queries(0):
        assert cache.get("rt-quiet").skr_domain == "new.example.com"


def test_given_an_entry_refreshed_then_it_still_expires_after_the_cache_time(
    clock, django_assert_num_queries
):
    KymaFactory(runtime_id="rt-a")
    cache = by_runtime(clock)
    cache.get("rt-a")
    clock.now += 1.5
    cache.refresh_due(within=1.0)
    clock.now += 2.1  # more than LISTENER_CACHE_SECONDS after the refresh read it
    with django_assert_num_queries(1):
        cache.get("rt-a")


def test_given_an_entry_not_asked_for_lately_then_it_is_not_refreshed(clock, django_assert_num_queries):
    KymaFactory(runtime_id="rt-gone-quiet")
    cache = by_runtime(clock)
    cache.get("rt-gone-quiet")
    clock.now += KEPT_FOR + 1
    with django_assert_num_queries(0):
        assert cache.refresh_due(within=1.0) == 0
    with django_assert_num_queries(1):  # expired: the next event reads it again
        assert cache.get("rt-gone-quiet") is not None


def test_given_entries_far_from_expiry_then_the_round_reads_none_of_them(clock, django_assert_num_queries):
    KymaFactory(runtime_id="rt-fresh")
    cache = by_runtime(clock)
    cache.get("rt-fresh")
    with django_assert_num_queries(0):
        assert cache.refresh_due(within=1.0) == 0


def test_given_many_entries_due_then_one_query_refreshes_them_all_and_misses_stay_cached(
    clock, django_assert_num_queries
):
    for n in range(5):
        KymaFactory(runtime_id=f"rt-{n}")
    cache = by_runtime(clock)
    for n in range(5):
        cache.get(f"rt-{n}")
    assert cache.get("rt-unknown") is None
    clock.now += 1.5
    with django_assert_num_queries(1):
        assert cache.refresh_due(within=1.0) == 6
    clock.now += 1.5
    with django_assert_num_queries(0):
        assert [cache.get(f"rt-{n}").runtime_id for n in range(5)] == [f"rt-{n}" for n in range(5)]
        assert cache.get("rt-unknown") is None


def test_given_kymas_with_crossed_names_then_the_bulk_read_by_name_returns_only_the_pairs_asked():
    KymaFactory(namespace="ns-a", name="b")
    KymaFactory(namespace="ns-b", name="a")
    found = services._kymas_by_name([("ns-a", "a"), ("ns-a", "b")])
    assert list(found) == [("ns-a", "b")]


def test_given_one_cache_failing_when_a_round_runs_then_the_others_are_refreshed_all_the_same(clock):
    KymaFactory(runtime_id="rt-b", skr_domain="old.example.com")

    def unavailable(keys):
        raise DatabaseError("the database is away")

    failing = TTLCache(lambda key: None, unavailable, clock=clock)
    working = by_runtime(clock)
    refresher = Refresher()
    refresher.add(failing)
    refresher.add(working)
    failing.get("anything")
    working.get("rt-b")
    Kyma.objects.filter(runtime_id="rt-b").update(skr_domain="new.example.com")
    clock.now += 1.5
    refresher.round(every=1.0)
    clock.now += 1.5
    assert working.get("rt-b").skr_domain == "new.example.com"
