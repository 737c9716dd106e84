"""The SRE's pages in a real browser: the Kyma page follows a reconcile without a reload, the Kyma
list fits 1400 px, the dashboard groups failures by reason. Screenshots in test-artifacts/browser/."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone
from selenium.webdriver.common.by import By

from fleet.models import Kyma
from tests.browser.test_admin_ui import log_in, new_kyma, until
from tests.factories import KymaFactory, ModuleFactory

pytestmark = [pytest.mark.browser, pytest.mark.integration, pytest.mark.django_db(transaction=True)]

UNREACHABLE = (
    "runtime rt-x: MaxRetryError: HTTPSConnectionPool(host='10.1.2.3', port=6443): Max retries exceeded "
    "with url: /api (Caused by NewConnectionError('<urllib3.connection.HTTPSConnection object at 0x7f>: "
    "Failed to establish a new connection: [Errno 111] Connection refused'))"
)


def live_badge(browser) -> str:
    """The state badge, read in one step: the page's poll may swap the element at any moment."""
    return browser.execute_script(
        "const b = document.querySelector('#cp-kyma-summary .cp-badge'); return b ? b.textContent : '';"
    )


def text_of(browser, element_id: str) -> str:
    return browser.execute_script(
        f"const e = document.getElementById('{element_id}'); return e ? e.innerText : '';"
    )


def no_horizontal_scroll(browser) -> tuple[int, int]:
    return browser.execute_script(
        "const e = document.scrollingElement; return [e.scrollWidth, e.clientWidth];"
    )


def results_scroll(browser) -> tuple[int, int]:
    """The admin puts a list's table in a box that scrolls on its own: it must not need to."""
    return browser.execute_script(
        "const e = document.querySelector('#changelist .results'); return [e.scrollWidth, e.clientWidth];"
    )


def full_shot(browser, step: str) -> None:
    """A screenshot of the whole page (the window grows to the page's height, then shrinks back)."""
    height = browser.execute_script("return document.documentElement.scrollHeight;")
    browser.set_window_size(1400, min(max(1000, height + 140), 6000))
    browser.shot(step)
    browser.set_window_size(1400, 1000)


def seed_failures(now: dt.datetime) -> None:
    """A fleet with failing runtimes for three reasons, and a few healthy ones with modules."""
    ModuleFactory(name="keda")
    unreachable = [
        {"type": "Runtime", "status": "False", "reason": "Unreachable", "message": UNREACHABLE,
         "lastTransitionTime": "2026-01-02T03:04:05Z"},
    ]  # fmt: skip
    for index in range(14):
        KymaFactory(
            name=f"unreachable-{index:02}",
            runtime_id=f"0d7e5c1a-9f3b-4c2e-8a61-{index:012}",
            state="Error",
            state_reason="Unreachable",
            conditions=unreachable,
            modules=[{"name": "keda"}, {"name": "serverless"}, {"name": "istio"}, {"name": "eventing"}],
            module_status=[{"name": "keda", "state": "Ready"}],
            last_reconcile_at=now - dt.timedelta(seconds=index * 7),
            error_streak=index + 1,
        )
    watcher = [
        {"type": "Runtime", "status": "True", "reason": "Reachable", "message": "the API server answers"},
        {"type": "SKRWebhook", "status": "False", "reason": "WatcherFailing",
         "message": "the runtime watcher cannot run: CrashLoopBackOff: back-off 5m0s restarting failed"},
    ]  # fmt: skip
    for index in range(5):
        KymaFactory(
            name=f"crashing-watcher-{index}",
            state="Error",
            state_reason="WatcherFailing",
            conditions=watcher,
            last_reconcile_at=now - dt.timedelta(minutes=index),
        )
    catalog = [{"type": "ModuleCatalog", "status": "False", "reason": "ModuleNotInCatalog",
                "message": "unknown in the catalog: eventing-auth"}]  # fmt: skip
    KymaFactory(name="typo-in-modules", state="Error", state_reason="ModuleNotInCatalog", conditions=catalog)
    for index in range(6):
        KymaFactory(name=f"healthy-{index}", state="Ready", modules=[{"name": "keda", "channel": "fast"}])


def test_the_kyma_page_follows_a_reconcile_without_a_reload(browser, web, worker, admin_user, runtimes):
    kyma = new_kyma(runtimes(), "live-kyma")
    log_in(browser, web)
    browser.get(f"{web}/admin/controlplane/kyma/{kyma.pk}/change/")
    until(lambda: browser.find_elements(By.ID, "cp-kyma-summary"), "the Kyma page", browser)
    assert live_badge(browser) == "New"
    browser.find_element(By.ID, "cp-reconcile-now").click()
    until(lambda: browser.find_elements(By.CLASS_NAME, "messagelist"), "the message", browser)
    browser.execute_script("window.cpMarker = 'same page';")  # gone if the page reloads

    until(
        lambda: live_badge(browser) == "Ready",
        "the state turning Ready without a reload",
        browser,
        timeout=60,
    )
    assert browser.execute_script("return window.cpMarker;") == "same page"
    timeline = text_of(browser, "cp-timeline")
    assert "why: user request" in timeline
    assert "Deployment kyma-system/skr-webhook created" in timeline
    # (each moment with how long ago it was: "just now" when the page showed it within a second)
    assert "UTC" in timeline and ("ago" in timeline or "just now" in timeline)
    assert not browser.find_elements(By.CSS_SELECTOR, "#cp-live textarea, #cp-live input[name=channel]")
    full_shot(browser, "kyma-page")

    browser.find_element(By.ID, "cp-edit").click()
    until(lambda: browser.find_elements(By.NAME, "modules-0-name"), "the edit form", browser)
    assert not browser.find_elements(By.NAME, "_addanother")
    browser.shot("kyma-edit")
    assert Kyma.objects.get(pk=kyma.pk).state == "Ready"


def test_an_unreachable_runtime_reads_as_one_sentence_with_stale_modules(browser, web, admin_user):
    seed_failures(timezone.now())
    kyma = Kyma.objects.get(name="unreachable-00")
    log_in(browser, web)
    browser.get(f"{web}/admin/controlplane/kyma/{kyma.pk}/change/")
    problem = until(lambda: text_of(browser, "cp-problem"), "the problem", browser)
    assert problem.startswith("The runtime's API server cannot be reached: connection refused.")
    assert "HTTPSConnectionPool" not in problem  # folded away until asked for
    modules = text_of(browser, "cp-modules")
    assert "Unknown" in modules and "stale: last known Ready" in modules
    full_shot(browser, "kyma-unreachable")
    browser.execute_script("document.querySelector('#cp-problem summary').click();")
    until(lambda: "HTTPSConnectionPool" in text_of(browser, "cp-problem"), "the raw detail unfolded", browser)
    # the page's poll swaps the live part in: the unfolded detail stays open
    browser.execute_script("document.getElementById('cp-live').setAttribute('data-live-updates', '0');")
    until(
        lambda: (
            browser.execute_script(
                "return document.getElementById('cp-live').getAttribute('data-live-updates');"
            )
            != "0"
        ),
        "a live update",
        browser,
    )
    assert "HTTPSConnectionPool" in text_of(browser, "cp-problem")
    browser.shot("kyma-unreachable-detail")


def test_the_kyma_list_fits_1400_px(browser, web, admin_user):
    seed_failures(timezone.now())
    log_in(browser, web)
    assert browser.execute_script("return window.innerWidth;") <= 1400
    browser.get(f"{web}/admin/controlplane/kyma/?o=3")  # by reason
    until(lambda: browser.find_elements(By.CSS_SELECTOR, "td.field-reason_column"), "the Kyma list", browser)
    headers = [
        th.text.strip().upper() for th in browser.find_elements(By.CSS_SELECTOR, "#result_list thead th")
    ]
    assert {"REASON", "MODULES", "LAST CHANGE"} <= set(headers), headers
    scroll, client = no_horizontal_scroll(browser)
    table, box = results_scroll(browser)
    browser.shot("kyma-list-1400")
    assert scroll <= client, f"the page scrolls sideways: {scroll} > {client}"
    assert table <= box, f"the list's table scrolls sideways: {table} > {box}"


def test_the_dashboard_groups_failures_by_reason(browser, web, admin_user):
    seed_failures(timezone.now())
    log_in(browser, web)
    groups = browser.find_elements(By.CSS_SELECTOR, "#cp-failing details.cp-reason-group")
    assert [g.get_attribute("data-reason") for g in groups] == [
        "Unreachable",
        "WatcherFailing",
        "ModuleNotInCatalog",
    ]
    assert groups[0].find_element(By.CLASS_NAME, "cp-count").text == "14"
    groups[0].find_element(By.TAG_NAME, "summary").click()
    rows = groups[0].find_elements(By.CSS_SELECTOR, "tbody tr")
    assert len(rows) == 11  # ten newest and "… 4 more (list all 14)"
    assert "4 more (list all 14)" in rows[-1].text
    full_shot(browser, "dashboard")
    scroll, client = no_horizontal_scroll(browser)
    assert scroll <= client
