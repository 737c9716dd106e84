"""The web role under gunicorn and a Celery worker, as real processes on the test database."""

from __future__ import annotations

import time

import pytest
import requests

from fleet.models import Kyma
from fleet.queue.requests import reconcile_queued
from tests.fleet.test_documents import UPSTREAM_KYMA
from tests.support.processes import start_web, start_worker

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def web():
    proc, url = start_web()
    yield url
    proc.stop()


# The first answer may wait for a gunicorn worker that is still booting on a loaded machine.
READ_TIMEOUT = 60


@pytest.fixture
def worker():
    proc = start_worker()
    yield proc
    proc.stop()


def test_given_gunicorn_web_when_probing_then_health_ready_metrics_and_static_admin_assets(web):
    assert requests.get(f"{web}/healthz", timeout=READ_TIMEOUT).json() == {"status": "ok"}
    ready = requests.get(f"{web}/readyz", timeout=READ_TIMEOUT)
    assert ready.status_code == 200, ready.text
    assert "controlplane_kymas" in requests.get(f"{web}/metrics", timeout=READ_TIMEOUT).text
    css = requests.get(f"{web}/static/admin/css/base.css", timeout=READ_TIMEOUT)
    assert css.status_code == 200 and "body" in css.text


def test_given_kyma_posted_to_gunicorn_when_worker_runs_then_it_reconciles(web, worker, admin_user):
    from rest_framework.authtoken.models import Token

    token = Token.objects.create(user=admin_user).key
    response = requests.post(
        f"{web}/api/v1/kymas/",
        data=UPSTREAM_KYMA,
        headers={"Content-Type": "application/yaml", "Authorization": f"Token {token}"},
        timeout=10,
    )
    assert response.status_code == 201, response.text
    # The reconcile writes its status, then releases the lease: wait for both, not the first.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        kyma = Kyma.objects.get(name="3d1f0b6c-runtime")
        if kyma.last_reconcile_at is not None and kyma.lease_owner == "":
            break
        time.sleep(0.1)
    assert kyma.last_reconcile_at is not None, worker.output()
    assert kyma.lease_owner == "", f"the lease was never released: {kyma.lease_owner}"
    assert reconcile_queued([kyma.pk]) == set()
