"""An operator in a real browser: log in, read the fleet dashboard, open a Kyma, reconcile it."""

from __future__ import annotations

import time
from collections.abc import Callable
from urllib.parse import urlsplit

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from fleet.models import Kyma
from kernel.documents.yamlio import dump_yaml
from kernel.sealing import Sealed
from pki import services as pki
from tests.factories import KymaFactory
from tests.support.listener import klm_watcher  # stored directly: no fan-out reconcile

pytestmark = [pytest.mark.browser, pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def until(check: Callable[[], object], what: str, browser, timeout: float = 30) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.25)
    browser.shot("timeout")
    raise AssertionError(f"{what} did not happen within {timeout} s")


def log_in(browser, web: str) -> None:
    browser.get(f"{web}/admin/login/?next=/admin/fleet/")
    browser.find_element(By.NAME, "username").send_keys("root")
    browser.find_element(By.NAME, "password").send_keys("root-password-123")
    browser.find_element(By.CSS_SELECTOR, "input[type=submit]").click()

    def on_dashboard() -> bool:
        # The login page's own URL ends with "?next=/admin/fleet/": compare the path, then wait for
        # the dashboard's content so the next navigation does not cancel the login.
        return urlsplit(browser.current_url).path == "/admin/fleet/" and bool(
            browser.find_elements(By.ID, "cp-kymas-total")
        )

    until(on_dashboard, "landing on the dashboard", browser)


def new_kyma(runtime, name: str) -> Kyma:
    """A Kyma reachable through its kubeconfig but not reconciled yet (state New)."""
    pki.ca_bootstrap()
    klm_watcher()
    kyma = KymaFactory(name=name, modules=[])
    Kyma.objects.filter(pk=kyma.pk).update(kubeconfig=Sealed.seal(dump_yaml([runtime.kubeconfig()])))
    return kyma


def flash(browser) -> str:
    """The admin's message after a form post (waiting for the next page to load)."""
    found = until(lambda: browser.find_elements(By.CLASS_NAME, "messagelist"), "a message", browser)
    return found[0].text


def badge(browser) -> str:
    return browser.find_element(By.CSS_SELECTOR, "#cp-kyma-summary .cp-badge").text


def test_operator_reads_the_dashboard_opens_a_kyma_and_reconciles_it(
    browser, web, worker, admin_user, runtimes
):
    kyma = new_kyma(runtimes(), "browser-kyma")
    log_in(browser, web)
    total = browser.find_element(By.ID, "cp-kymas-total")
    assert total.text == "1"
    counts = {
        e.get_attribute("data-state"): e.text for e in browser.find_elements(By.CLASS_NAME, "cp-state-count")
    }
    assert counts.get("New") == "1" or counts.get("") == "1", counts
    browser.shot("dashboard")

    total.click()  # every figure links to the list it counts
    until(lambda: browser.find_elements(By.PARTIAL_LINK_TEXT, "browser-kyma"), "the Kyma list", browser)
    assert urlsplit(browser.current_url).path == "/admin/controlplane/kyma/"
    browser.find_element(By.PARTIAL_LINK_TEXT, "browser-kyma").click()
    until(lambda: browser.find_elements(By.ID, "cp-kyma-summary"), "the Kyma page", browser)
    assert badge(browser) == "New"
    assert "No conditions yet" in browser.find_element(By.ID, "cp-conditions").text
    browser.shot("kyma-new")

    browser.find_element(By.ID, "cp-reconcile-now").click()
    assert "Reconcile queued for 1 Kyma(s)" in flash(browser)

    def reconciled() -> bool:
        browser.refresh()
        return badge(browser) == "Ready"

    until(reconciled, "the state turning Ready", browser)
    conditions = browser.find_element(By.ID, "cp-conditions").text
    assert "SKRWebhook" in conditions and "Runtime" in conditions
    assert "reconcile" in browser.find_element(By.ID, "cp-timeline").text.lower()
    browser.shot("kyma-ready")
    assert Kyma.objects.get(pk=kyma.pk).state == "Ready"


def test_operator_reconciles_a_selection_from_the_list(browser, web, worker, admin_user, runtimes):
    kymas = [new_kyma(runtimes(), f"selected-{n}") for n in range(2)]
    new_kyma(runtimes(), "left-alone")
    log_in(browser, web)
    browser.get(f"{web}/admin/controlplane/kyma/?q=selected")
    boxes = browser.find_elements(By.CSS_SELECTOR, "input.action-select")
    assert len(boxes) == 2, browser.current_url
    for box in boxes:
        box.click()
    Select(browser.find_element(By.NAME, "action")).select_by_visible_text("Reconcile now")
    browser.find_element(By.CSS_SELECTOR, "button[name=index]").click()
    assert "Reconcile queued for 2 Kyma(s)" in flash(browser)

    def both_ready() -> bool:
        browser.refresh()
        states = [cell.text for cell in browser.find_elements(By.CSS_SELECTOR, "td.field-state_column")]
        return states == ["Ready", "Ready"]

    until(both_ready, "both selected Kymas Ready in the list", browser)
    browser.shot("list-ready")
    assert sorted(Kyma.objects.filter(state="Ready").values_list("name", flat=True)) == [
        k.name for k in kymas
    ]
    assert Kyma.objects.get(name="left-alone").state == ""
