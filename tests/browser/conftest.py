"""Headless Chromium (Debian's ``chromium`` and ``chromium-driver``) against the real web role.

``make test`` installs the two packages when they are missing and it can (root and apt-get); where
it cannot, it leaves these tests out and says why. Screenshots go to ``test-artifacts/browser/``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

from tests.support.processes import ROOT, start_web, start_worker
from tests.support.runtimes import emulator_host, runtimes  # noqa: F401 - fixtures

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver")
ARTIFACTS = ROOT / "test-artifacts" / "browser"


@pytest.fixture(scope="module")
def web(django_db_setup, django_db_blocker) -> Iterator[str]:
    proc, url = start_web()
    yield url
    proc.stop()


@pytest.fixture(scope="module")
def worker(django_db_setup, django_db_blocker):
    proc = start_worker(concurrency=1)
    yield proc
    proc.stop()


@pytest.fixture
def browser(request) -> Iterator[webdriver.Chrome]:
    for path, package in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
        if not Path(path).exists():
            pytest.fail(f"{path} is missing: install Debian's {package} (make test does it where it can)")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1000"):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.implicitly_wait(0)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    driver.shot = lambda step: driver.save_screenshot(str(ARTIFACTS / f"{request.node.name}-{step}.png"))
    yield driver
    if request.node.rep_call.failed if hasattr(request.node, "rep_call") else False:
        driver.shot("failure")
    driver.quit()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report
