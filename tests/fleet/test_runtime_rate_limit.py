"""Each runtime's client is rate-limited as upstream's SKR client is (50 requests a second, bursts of
100, as settings): a request over the rate waits its turn, and the waits are counted and exported."""

from __future__ import annotations

import pytest

from fleet.k8s.client import RateLimit
from fleet.models import FleetCounter
from fleet.models.records import THROTTLED_MILLISECONDS, THROTTLED_REQUESTS
from pki import services as pki
from tests.reconciler.helpers import reconcile
from tests.support.clock import Clock
from tests.support.runtimes import connected_kyma, keda_module, klm_watcher

pytestmark = pytest.mark.django_db


def test_the_defaults_are_upstreams(settings):
    assert (settings.RUNTIME_CLIENT_QPS, settings.RUNTIME_CLIENT_BURST) == (50, 100)


def test_given_a_burst_then_requests_beyond_it_wait_one_rate_step_each(settings):
    settings.RUNTIME_CLIENT_QPS, settings.RUNTIME_CLIENT_BURST = 50, 100
    clock = Clock()
    limit = RateLimit(clock)

    waits = [limit.take() for _ in range(103)]  # all at one instant

    assert waits[:100] == [0.0] * 100
    assert waits[100:] == pytest.approx([0.02, 0.04, 0.06])  # queued in turn, 1/50 s apart


def test_given_a_quiet_while_then_the_bucket_fills_again_up_to_the_burst(settings):
    settings.RUNTIME_CLIENT_QPS, settings.RUNTIME_CLIENT_BURST = 50, 100
    clock = Clock()
    limit = RateLimit(clock)
    for _ in range(100):
        limit.take()

    clock.now += 1.0  # 50 tokens back
    waits = [limit.take() for _ in range(51)]

    assert waits[:50] == [0.0] * 50 and waits[50] == pytest.approx(0.02)
    clock.now += 60
    assert [limit.take() for _ in range(100)] == [0.0] * 100  # never more than the burst


def test_given_a_steady_caller_then_the_rate_holds_over_any_second(settings):
    settings.RUNTIME_CLIENT_QPS, settings.RUNTIME_CLIENT_BURST = 50, 100
    clock = Clock()
    limit = RateLimit(clock)
    sent = []
    for _ in range(1000):  # a caller that sends again as soon as it may
        clock.now += limit.take()
        sent.append(clock.now)

    worst = max(
        sum(1 for t in sent if start <= t < start + 1.0) for start in sent
    )  # requests in any one-second window
    assert worst <= 50 + 100


def test_given_no_limit_then_nothing_waits(settings):
    settings.RUNTIME_CLIENT_QPS = 0
    limit = RateLimit(Clock())
    assert [limit.take() for _ in range(1000)] == [0.0] * 1000


def test_given_a_reconcile_over_the_rate_then_its_waits_are_counted_and_exported(runtimes, settings, client):
    settings.RUNTIME_CLIENT_QPS, settings.RUNTIME_CLIENT_BURST = 20, 1  # every request after the first waits
    pki.ca_bootstrap()
    klm_watcher()
    keda_module()
    kyma = connected_kyma(runtimes())

    reconcile(kyma)

    throttled = FleetCounter.objects.get(name=THROTTLED_REQUESTS).total
    waited = FleetCounter.objects.get(name=THROTTLED_MILLISECONDS).total
    assert throttled > 10 and waited > 0
    text = client.get("/metrics").content.decode()
    assert f"controlplane_runtime_requests_throttled_total {throttled:.1f}" in text
    assert "# TYPE controlplane_runtime_throttled_seconds_total counter" in text
