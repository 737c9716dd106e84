"""Seeing rollouts: the rollout page (waves, counts, gate, runtimes, why it halted, timeline, the
operator's buttons), the Kyma page (which rollout holds which target, the next window), the fleet
dashboard (rollouts under way) and the metrics."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from fleet.models import Kyma, Module, Rollout, RolloutState, RolloutTarget, TargetState
from fleet.rollouts import services as rollout_services
from fleet.services import modules as module_services
from tests.factories import KymaFactory, ModuleFactory

pytestmark = pytest.mark.django_db


def make_rollout(count: int = 6) -> Rollout:
    ModuleFactory(name="keda", channels={"regular": "1.0.0"})
    KymaFactory.create_batch(count, modules=[{"name": "keda"}], state="Ready")
    keda = Module.objects.get(name="keda")
    keda.channels = {"regular": "1.1.0"}
    module_services.module_save(module=keda)
    return Rollout.objects.get()


def halt(rollout: Rollout) -> Rollout:
    [canary] = RolloutTarget.objects.filter(rollout=rollout, state=TargetState.PROGRESSING)
    canary.state, canary.reason = TargetState.FAILED, "keda 1.1.0: Error: the operator crashed"
    canary.save()
    from fleet.rollouts.engine import rollouts_advance

    rollouts_advance()
    rollout.refresh_from_db()
    assert rollout.state == RolloutState.HALTED
    return rollout


def page_of(client, rollout: Rollout) -> str:
    response = client.get(reverse("admin:controlplane_rollout_change", args=[rollout.pk]))
    assert response.status_code == 200
    return response.content.decode()


def test_the_rollout_page_shows_waves_counts_gate_runtimes_why_it_halted_and_the_timeline(admin_client):
    rollout = halt(make_rollout())
    html = page_of(admin_client, rollout)
    assert "module keda in channel regular: 1.0.0 → 1.1.0" in html
    assert 'id="cp-rollout-halted"' in html and "the operator crashed" in html
    for wave in ("canary", "wave-2", "wave-3", "wave-4"):
        assert f"<strong>{wave}</strong>" in html
    assert "Failed 1" in html and "Pending 5" in html
    assert "Gate of wave 1/4 (canary)" in html and "at most 0 may fail" in html
    assert 'data-state="Failed"' in html
    for event in ("created", "wave-started", "halted"):
        assert f'<span class="cp-chip">{event}</span>' in html
    for button in ("cp-rollout-resume", "cp-rollout-abort", "cp-rollout-rollback"):
        assert f'id="{button}"' in html
    assert 'id="cp-rollout-pause"' not in html  # halted: nothing to pause


def test_a_button_of_the_page_steers_the_rollout_and_a_get_does_nothing(admin_client):
    rollout = make_rollout()
    url = reverse("admin:controlplane_rollout_do", args=[rollout.pk, "pause"])
    assert admin_client.get(url).status_code == 405
    response = admin_client.post(url)
    assert response.status_code == 302
    assert Rollout.objects.get(pk=rollout.pk).state == RolloutState.PAUSED
    admin_client.post(url)  # paused already: said, nothing breaks
    refused = admin_client.post(
        reverse("admin:controlplane_rollout_do", args=[rollout.pk, "rollback"]), follow=True
    )
    assert Rollout.objects.get(pk=rollout.pk).state == RolloutState.ROLLED_BACK
    assert "rolled back" in refused.content.decode()


def test_a_viewer_sees_the_page_without_buttons(client, django_user_model):
    rollout = make_rollout()
    from django.contrib.auth.models import Permission

    user = django_user_model.objects.create_user("viewer", password="x-123456789", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_rollout"))
    client.force_login(user)
    html = page_of(client, rollout)
    assert 'id="cp-rollout-actions"' not in html
    assert (
        client.post(reverse("admin:controlplane_rollout_do", args=[rollout.pk, "abort"])).status_code == 403
    )
    assert Rollout.objects.get(pk=rollout.pk).state == RolloutState.PROGRESSING


def test_the_page_makes_the_same_number_of_queries_for_a_bigger_rollout(admin_client):
    small = make_rollout(4)
    page_of(admin_client, small)
    with CaptureQueriesContext(connection) as few:
        page_of(admin_client, small)
    Rollout.objects.all().delete()
    Kyma.objects.all().delete()
    Module.objects.all().delete()
    big = make_rollout(60)
    with CaptureQueriesContext(connection) as many:
        page_of(admin_client, big)
    assert len(many) == len(few)


def test_the_rollouts_list_shows_state_change_and_progress(admin_client):
    make_rollout()
    html = admin_client.get(reverse("admin:controlplane_rollout_changelist")).content.decode()
    assert "keda-regular-1.1.0" in html and "module keda in channel regular" in html and "1 / 6" in html


def test_the_kyma_page_says_which_rollout_holds_which_target_and_when_its_window_opens(admin_client):
    from django.utils import timezone

    from fleet.models import MaintenancePolicy

    # A window on another day than today's (a window open right now would say so instead).
    day = (timezone.now() + dt.timedelta(days=3)).strftime("%a")
    MaintenancePolicy.objects.create(
        policy={"rules": [], "default": {"days": [day], "begin": "21:00:00+00:00", "end": "23:00:00+00:00"}}
    )
    rollout = make_rollout()
    pending = RolloutTarget.objects.filter(rollout=rollout, state=TargetState.PENDING).first().kyma
    html = admin_client.get(reverse("admin:controlplane_kyma_change", args=[pending.pk])).content.decode()
    assert f">{rollout.name}</a>" in html
    assert "module keda in channel regular: 1.0.0 → 1.1.0" in html
    assert "the old one, until its wave starts" in html
    assert "Maintenance window:" in html and "the next opens" in html and "21:00:00" in html


def test_the_kyma_page_without_rollouts_or_policy_says_so(admin_client):
    kyma = KymaFactory()
    html = admin_client.get(reverse("admin:controlplane_kyma_change", args=[kyma.pk])).content.decode()
    assert 'id="cp-no-rollouts"' in html
    assert "no maintenance-window policy is configured" in html


def test_the_dashboard_lists_rollouts_under_way_halted_first(admin_client):
    first = halt(make_rollout())
    Module.objects.create(
        name="serverless",
        channels={"regular": "1.0.0"},
        cr_version="v1",
        cr_kind="Serverless",
        cr_plural="serverlesses",
    )
    for kyma in Kyma.objects.all():
        kyma.modules = [*kyma.modules, {"name": "serverless"}]
        kyma.save()
    serverless = Module.objects.get(name="serverless")
    serverless.channels = {"regular": "1.2.0"}
    module_services.module_save(module=serverless)
    html = admin_client.get("/admin/fleet/").content.decode()
    assert 'id="cp-rollouts-total">2<' in html and 'id="cp-rollouts-halted">1<' in html
    table = html[html.index('id="cp-rollouts-table"') :]
    assert table.index(first.name) < table.index("serverless-regular-1.2.0")


def test_the_metrics_say_rollout_state_and_progress(client):
    rollout = make_rollout()
    rollout_services.rollout_pause(rollout=rollout)
    text = client.get("/metrics").content.decode()
    assert 'controlplane_rollouts{state="Paused"} 1.0' in text
    labels = f'kind="ModuleVersion",rollout="{rollout.name}"'
    assert f'controlplane_rollout_runtimes{{{labels},state="Progressing"}} 1.0' in text
    ratio = f'controlplane_rollout_progress_ratio{{kind="ModuleVersion",rollout="{rollout.name}"}}'
    assert f"{ratio} {1 / 6}" in text
    assert f'controlplane_rollout_current_wave{{kind="ModuleVersion",rollout="{rollout.name}"}} 1.0' in text
