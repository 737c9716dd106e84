"""The WatcherHeartbeat condition: a runtime watcher that stops reporting is noticed and polled."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from fleet.models import Kyma
from fleet.selectors import kyma_ids_watcher_silent
from pki import services as pki
from runtime_emulator import PodHealth
from tests.factories import KymaFactory
from tests.support.runtimes import connected_kyma, klm_watcher

from .helpers import conditions, reconcile

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def catalog(settings):
    settings.WATCHER_SILENT_AFTER = 120
    settings.RECONCILE_WARNING_INTERVAL = 30
    settings.RECONCILE_READY_INTERVAL = 300
    pki.ca_bootstrap()
    klm_watcher()


def ready_kyma(runtimes, **fields) -> Kyma:
    kyma = connected_kyma(runtimes(), modules=[], **fields)
    reconcile(kyma)
    return kyma


def webhook_ready_since(kyma: Kyma, moment: dt.datetime) -> None:
    """Pretend the runtime watcher became ready at ``moment``."""
    stamp = moment.strftime("%Y-%m-%dT%H:%M:%SZ")
    for condition in kyma.conditions:
        if condition["type"] == "SKRWebhook":
            condition["lastTransitionTime"] = stamp
    Kyma.objects.filter(pk=kyma.pk).update(conditions=kyma.conditions)


def seconds_until_next(kyma: Kyma) -> float:
    return (kyma.next_reconcile_at - kyma.last_reconcile_at).total_seconds()


def test_given_a_fresh_watcher_when_not_heard_yet_then_ready_and_rechecked_when_its_window_ends(runtimes):
    kyma = ready_kyma(runtimes)
    assert kyma.state == "Ready"
    assert "WatcherHeartbeat" not in conditions(kyma)
    assert 0 < seconds_until_next(kyma) <= 120  # not the 300 s of Ready: the window ends first


def test_given_a_watcher_never_heard_when_its_window_passed_then_warning_and_polled_more_often(runtimes):
    kyma = ready_kyma(runtimes)
    webhook_ready_since(kyma, timezone.now() - dt.timedelta(minutes=10))
    reconcile(kyma)
    assert kyma.state == "Warning"
    assert conditions(kyma)["WatcherHeartbeat"] == ("False", "WatcherSilent")
    [condition] = [c for c in kyma.conditions if c["type"] == "WatcherHeartbeat"]
    assert "since it became ready" in condition["message"]
    assert seconds_until_next(kyma) == 30


def test_given_a_watcher_heard_recently_when_reconciled_then_ready_with_the_condition_true(runtimes):
    kyma = ready_kyma(runtimes)
    Kyma.objects.filter(pk=kyma.pk).update(watcher_last_seen_at=timezone.now() - dt.timedelta(seconds=10))
    reconcile(kyma)
    assert kyma.state == "Ready"
    assert conditions(kyma)["WatcherHeartbeat"] == ("True", "Heartbeat")
    assert seconds_until_next(kyma) == 300


def test_given_a_watcher_that_fell_silent_when_it_reports_again_then_ready_again(runtimes):
    kyma = ready_kyma(runtimes)
    webhook_ready_since(kyma, timezone.now() - dt.timedelta(hours=2))
    last_heard = (timezone.now() - dt.timedelta(minutes=10)).replace(microsecond=0)
    Kyma.objects.filter(pk=kyma.pk).update(watcher_last_seen_at=last_heard)
    reconcile(kyma)
    assert kyma.state == "Warning"
    [condition] = [c for c in kyma.conditions if c["type"] == "WatcherHeartbeat"]
    assert condition["message"].startswith(
        f"no heartbeat from the runtime watcher since {last_heard.strftime('%Y-%m-%dT%H:%M:%SZ')}"
    )
    status_before = kyma.conditions
    reconcile(kyma)  # still silent: the same status, nothing written
    assert kyma.conditions == status_before

    Kyma.objects.filter(pk=kyma.pk).update(watcher_last_seen_at=timezone.now())
    reconcile(kyma)
    assert kyma.state == "Ready"
    assert conditions(kyma)["WatcherHeartbeat"] == ("True", "Heartbeat")


def test_given_the_detection_turned_off_when_reconciled_then_the_condition_goes(runtimes, settings):
    kyma = ready_kyma(runtimes)
    webhook_ready_since(kyma, timezone.now() - dt.timedelta(hours=1))
    reconcile(kyma)
    assert kyma.state == "Warning"
    settings.WATCHER_SILENT_AFTER = 0
    reconcile(kyma)
    assert kyma.state == "Ready"
    assert "WatcherHeartbeat" not in conditions(kyma)


def test_given_a_failing_watcher_when_reconciled_then_silence_is_not_claimed(runtimes):
    runtime = runtimes()
    kyma = connected_kyma(runtime, modules=[])
    runtime.set_pod_health("kyma-system", "skr-webhook", PodHealth.crash_loop_backoff())
    reconcile(kyma)
    assert kyma.state == "Error"
    assert conditions(kyma)["SKRWebhook"] == ("False", "WatcherFailing")
    assert "WatcherHeartbeat" not in conditions(kyma)


def test_silent_ready_kymas_are_selected_for_the_beat_check(settings):
    now = timezone.now()
    silent = KymaFactory(state="Ready", watcher_last_seen_at=now - dt.timedelta(minutes=5))
    KymaFactory(state="Ready", watcher_last_seen_at=now - dt.timedelta(seconds=5))  # heard
    KymaFactory(state="Warning", watcher_last_seen_at=now - dt.timedelta(minutes=5))  # already polled
    KymaFactory(state="Ready", watcher_last_seen_at=None)  # never heard: its reconcile rechecks
    assert [kyma_id for batch in kyma_ids_watcher_silent(limit=100) for kyma_id in batch] == [silent.pk]
    settings.WATCHER_SILENT_AFTER = 0
    assert list(kyma_ids_watcher_silent(limit=100)) == []
