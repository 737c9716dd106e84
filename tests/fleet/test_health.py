"""/healthz, /readyz (503 when the broker or database is unreachable), /metrics."""

from __future__ import annotations

import pytest

from tests.factories import KymaFactory

pytestmark = pytest.mark.django_db


def test_given_process_up_when_healthz_then_200(client):
    assert client.get("/healthz").json() == {"status": "ok"}


def test_given_database_and_broker_up_when_readyz_then_200(client):
    response = client.get("/readyz")
    assert response.status_code == 200
    assert response.json()["checks"] == {"database": "ok", "broker": "ok"}


def test_given_broker_down_when_readyz_then_503_names_the_broker(client, broker_down):
    response = client.get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert body["checks"]["database"] == "ok"
    assert body["checks"]["broker"].startswith("broker unreachable")


def test_given_kymas_when_scraping_metrics_then_fleet_gauges_count_them(client):
    KymaFactory.create_batch(2, state="Ready")
    KymaFactory(state="Error")
    text = client.get("/metrics").content.decode()
    assert 'controlplane_kymas{state="Ready"} 2.0' in text
    assert 'controlplane_kymas{state="Error"} 1.0' in text


def test_given_post_when_healthz_then_405(client):
    assert client.post("/healthz").status_code == 405
