"""The web role's /metrics answers in the format the scraper asks for (prometheus_client's choice)."""

from __future__ import annotations

import pytest

from fleet.models import DriftCount
from tests.factories import KymaFactory

pytestmark = pytest.mark.django_db


def test_given_a_scraper_asking_for_openmetrics_when_scraping_then_openmetrics_with_fleet_gauges(client):
    KymaFactory(state="Ready")
    response = client.get("/metrics", HTTP_ACCEPT="application/openmetrics-text; version=1.0.0")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("application/openmetrics-text")
    text = response.content.decode()
    assert 'controlplane_kymas{state="Ready"} 1.0' in text
    assert text.endswith("# EOF\n")


def test_given_no_preference_when_scraping_then_the_classic_text_format(client):
    response = client.get("/metrics")
    assert response["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert "# TYPE controlplane_kymas gauge" in response.content.decode()


def test_given_drift_corrections_when_scraping_then_the_counter_by_kind(client):
    DriftCount.objects.create(kind="Deployment", total=3)
    text = client.get("/metrics").content.decode()
    assert "# TYPE controlplane_drift_corrected_total counter" in text
    assert 'controlplane_drift_corrected_total{kind="Deployment"} 3.0' in text
