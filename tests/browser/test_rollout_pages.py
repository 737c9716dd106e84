"""Rollouts in a real browser: the rollout page of a rollout under way and of a halted one, its
buttons, the dashboard's list, the Kyma page's holds and window. Screenshots in
test-artifacts/browser/."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone
from selenium.webdriver.common.by import By

from fleet.models import Kyma, MaintenancePolicy, Module, Rollout, RolloutState, RolloutTarget, TargetState
from fleet.rollouts.engine import rollouts_advance
from fleet.services import modules as module_services
from tests.browser.test_admin_ui import flash, log_in, until
from tests.browser.test_kyma_pages import full_shot, no_horizontal_scroll, text_of
from tests.factories import KymaFactory, ModuleFactory

pytestmark = [pytest.mark.browser, pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def seed_rollout(runtimes: int = 40) -> Rollout:
    """keda 1.0.0 -> 1.1.0 in regular over ``runtimes`` Ready runtimes (waves 1, 1, 8, 30 of 40)."""
    ModuleFactory(name="keda", channels={"regular": "1.0.0", "fast": "1.1.0"})
    for index in range(runtimes):
        region = "europe-west" if index % 3 else "us-east"
        KymaFactory(
            name=f"prod-{index:03}",
            runtime_id=f"5b1e0c2a-{index:04}-4d1f-9a6e-00000000{index:04}",
            modules=[{"name": "keda"}],
            state="Ready",
            labels={"kyma-project.io/region": region, "kyma-project.io/broker-plan-name": "standard"},
        )
    keda = Module.objects.get(name="keda")
    keda.channels = {**keda.channels, "regular": "1.1.0"}
    module_services.module_save(module=keda)
    return Rollout.objects.get()


def judge(rollout: Rollout, wave: int, state: str, reason: str = "", count: int | None = None) -> None:
    """What the wave's reconciles would have shown (the engine judges from the database)."""
    targets = RolloutTarget.objects.filter(rollout=rollout, wave=wave, state=TargetState.PROGRESSING)
    for target in targets[: count if count is not None else None]:
        Kyma.objects.filter(pk=target.kyma_id).update(last_reconcile_at=timezone.now())
        target.state, target.reason, target.judged_at = state, reason, timezone.now()
        target.save()


def test_a_rollout_halts_and_the_operator_sees_why_then_resumes_and_rolls_back(browser, web, admin_user):
    rollout = seed_rollout()
    judge(rollout, 0, TargetState.READY)
    rollouts_advance()  # canary passed: wave 2 released
    judge(rollout, 1, TargetState.FAILED, "keda 1.1.0: Error: the keda-operator Deployment is not available")
    rollouts_advance()
    assert Rollout.objects.get(pk=rollout.pk).state == RolloutState.HALTED

    log_in(browser, web)
    assert browser.find_element(By.ID, "cp-rollouts-halted").text == "1"
    table = text_of(browser, "cp-rollouts-table")
    assert "keda-regular-1.1.0" in table and "Halted" in table
    full_shot(browser, "dashboard-rollouts")

    browser.get(f"{web}/admin/controlplane/rollout/{rollout.pk}/change/")
    until(lambda: browser.find_elements(By.ID, "cp-rollout-waves"), "the rollout page", browser)
    assert browser.find_element(By.ID, "cp-rollout-state").text == "Halted"
    halted = text_of(browser, "cp-rollout-halted")
    assert "the gate of wave 2/4 (wave-2) failed: 1 of 1 runtime(s) failed" in halted
    assert "keda-operator Deployment is not available" in halted
    waves = browser.find_elements(By.CSS_SELECTOR, "#cp-rollout-waves tr.cp-wave")
    assert [w.find_element(By.TAG_NAME, "strong").text for w in waves] == [
        "canary",
        "wave-2",
        "wave-3",
        "wave-4",
    ]
    assert "current" in waves[1].text and "Failed 1" in waves[1].text
    assert "Failed 1" in text_of(browser, "cp-gate-failed") or "1 (100%)" in text_of(
        browser, "cp-gate-failed"
    )
    assert "Failed" in text_of(browser, "cp-rollout-runtimes")
    timeline = text_of(browser, "cp-rollout-timeline")
    assert "halted" in timeline and "gate of wave 1/4 (canary) passed" in timeline
    scroll, client = no_horizontal_scroll(browser)
    assert scroll <= client
    full_shot(browser, "rollout-halted")

    browser.find_element(By.ID, "cp-rollout-resume").click()
    assert "keda-regular-1.1.0 resumed" in flash(browser)
    assert "failures are accepted" in text_of(browser, "cp-rollout-timeline")
    assert browser.find_element(By.ID, "cp-rollout-state").text == "Progressing"
    assert "current" in browser.find_elements(By.CSS_SELECTOR, "#cp-rollout-waves tr.cp-wave")[2].text
    full_shot(browser, "rollout-resumed")

    browser.find_element(By.ID, "cp-rollout-rollback").click()
    browser.switch_to.alert.accept()
    assert "rolled back" in flash(browser) and "get the old target again" in flash(browser)
    assert browser.find_element(By.ID, "cp-rollout-state").text == "RolledBack"
    assert not browser.find_elements(By.ID, "cp-rollout-rollback")
    browser.shot("rollout-rolled-back")


def test_a_wave_waiting_for_maintenance_windows_and_the_kyma_page_of_a_held_runtime(browser, web, admin_user):
    # Windows on other days than today's: a window open right now would say so instead.
    europe, elsewhere = ((timezone.now() + dt.timedelta(days=n)).strftime("%a") for n in (2, 3))
    MaintenancePolicy.objects.create(
        policy={
            "rules": [
                {
                    "match": {"region": "europe|eu-"},
                    "windows": [{"days": [europe], "begin": "21:00:00+00:00", "end": "00:00:00+00:00"}],
                }
            ],
            "default": {"days": [elsewhere], "begin": "14:00:00+00:00", "end": "17:00:00+00:00"},
        }
    )
    rollout = seed_rollout()
    judge(rollout, 0, TargetState.READY)
    rollouts_advance()
    judge(rollout, 1, TargetState.READY)
    rollouts_advance()  # wave 3 (8 runtimes) released
    judge(rollout, 2, TargetState.READY, count=5)
    waiting = (
        "waiting for the next maintenance window to update keda from 1.0.0 to 1.1.0 (it requires downtime)"
    )
    for target in RolloutTarget.objects.filter(rollout=rollout, wave=2, state=TargetState.PROGRESSING):
        Kyma.objects.filter(pk=target.kyma_id).update(  # what the reconcile of a held runtime leaves
            last_reconcile_at=timezone.now(),
            module_status=[
                {
                    "name": "keda",
                    "state": "Ready",
                    "version": "1.0.0",
                    "maintenance": True,
                    "message": waiting,
                }
            ],
        )
    rollouts_advance()
    rollout.refresh_from_db()
    assert "3 waiting for their maintenance windows" in rollout.message

    log_in(browser, web)
    browser.get(f"{web}/admin/controlplane/rollout/{rollout.pk}/change/")
    until(lambda: browser.find_elements(By.ID, "cp-rollout-waves"), "the rollout page", browser)
    assert "3 waiting for their maintenance windows" in text_of(browser, "cp-rollout-message")
    runtimes = text_of(browser, "cp-rollout-runtimes")
    assert runtimes.count("Waiting") == 3 and "window opens" in runtimes
    assert "Ready 7" in text_of(browser, "cp-rollout-counts")
    full_shot(browser, "rollout-waiting-for-windows")

    held = RolloutTarget.objects.filter(rollout=rollout, wave=3).select_related("kyma").first().kyma
    browser.get(f"{web}/admin/controlplane/kyma/{held.pk}/change/")
    until(lambda: browser.find_elements(By.ID, "cp-rollouts"), "the Kyma page", browser)
    holds = text_of(browser, "cp-rollouts")
    assert "keda-regular-1.1.0" in holds and "the old one, until its wave starts" in holds
    assert "Maintenance window:" in text_of(browser, "cp-window") and "the next opens" in text_of(
        browser, "cp-window"
    )
    browser.execute_script("document.getElementById('cp-rollouts').scrollIntoView();")
    browser.shot("kyma-page-rollout")
