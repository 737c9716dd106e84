"""Admin pages for a logged-in staff user: lists, forms, write-only secrets, actions, deletes."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import Permission
from django.urls import reverse
from django.utils import timezone
from django_celery_beat.models import IntervalSchedule, PeriodicTask

from fleet.models import Kyma, ModuleConfig, ReconcileRecord
from fleet.services import modules
from tests.console.test_api import KUBECONFIG
from tests.factories import KymaFactory, ModuleFactory, SyncResourceFactory, WatcherFactory

pytestmark = pytest.mark.django_db

MODELS = [
    "controlplane_kyma",
    "controlplane_module",
    "controlplane_moduleconfig",
    "controlplane_syncresource",
    "watchers_watcher",
]


@pytest.fixture
def fleet():
    kyma = KymaFactory(
        state="Ready",
        conditions=[{"type": "SKRWebhook", "status": "True", "reason": "Ready", "message": "webhook ready"}],
        module_status=[{"name": "keda", "state": "Ready", "channel": "regular", "version": "1.0.0"}],
    )
    kyma.kubeconfig = KUBECONFIG
    kyma.save()
    module = ModuleFactory()
    config, _ = modules.moduleconfig_upsert(
        kyma=kyma, module=module, spec={"x": 1}, source_generation=1, source_resource_version="1"
    )
    return {
        "controlplane_kyma": kyma,
        "controlplane_module": module,
        "controlplane_moduleconfig": config,
        "controlplane_syncresource": SyncResourceFactory(kyma=kyma, module=module),
        "watchers_watcher": WatcherFactory(),
    }


@pytest.mark.parametrize("model", MODELS)
def test_given_staff_when_opening_changelist_and_change_page_then_they_render(admin_client, fleet, model):
    listing = admin_client.get(reverse(f"admin:{model}_changelist"))
    assert listing.status_code == 200
    change = admin_client.get(reverse(f"admin:{model}_change", args=[fleet[model].pk]))
    assert change.status_code == 200


@pytest.mark.parametrize("model", [m for m in MODELS if m != "controlplane_moduleconfig"])
def test_given_staff_when_opening_add_page_then_it_renders(admin_client, model):
    assert admin_client.get(reverse(f"admin:{model}_add")).status_code == 200


def test_given_stored_kubeconfig_when_viewing_the_kyma_then_it_is_shown_as_set_only(admin_client, fleet):
    page = admin_client.get(reverse("admin:controlplane_kyma_change", args=[fleet["controlplane_kyma"].pk]))
    html = page.content.decode()
    assert "very-secret-token" not in html and "clusters" not in html
    assert "set" in html
    assert "webhook ready" in html  # conditions are visible


def test_given_kyma_list_when_rendered_then_state_badge_and_runtime_id_show(admin_client, fleet):
    html = admin_client.get(reverse("admin:controlplane_kyma_changelist")).content.decode()
    assert "cp-badge" in html and fleet["controlplane_kyma"].runtime_id in html


def test_given_add_form_when_posted_with_broken_modules_then_the_field_error_is_shown(admin_client):
    response = admin_client.post(
        reverse("admin:controlplane_kyma_add"),
        {
            "namespace": "kcp-system",
            "name": "k-admin",
            "runtime_id": "rt-admin",
            "skr_domain": "k.example.com",
            "channel": "regular",
            "modules": '[{"name": "a"}, {"name": "a"}]',
            "labels": "{}",
            "annotations": "{}",
        },
    )
    assert response.status_code == 200
    assert "duplicate module" in response.content.decode()
    assert not Kyma.objects.filter(name="k-admin").exists()


def test_given_add_form_with_kubeconfig_when_posted_then_kyma_is_created_with_sealed_kubeconfig(admin_client):
    response = admin_client.post(
        reverse("admin:controlplane_kyma_add"),
        {
            "namespace": "kcp-system",
            "name": "k-admin",
            "runtime_id": "rt-admin",
            "skr_domain": "k.example.com",
            "channel": "regular",
            "modules": '[{"name": "keda"}]',
            "labels": "{}",
            "annotations": "{}",
            "kubeconfig_new": KUBECONFIG,
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    kyma = Kyma.objects.get(name="k-admin")
    assert kyma.kubeconfig.reveal() == KUBECONFIG
    assert kyma.modules == [{"customResourcePolicy": "CreateAndDelete", "managed": True, "name": "keda"}]


@pytest.mark.django_db(transaction=True)
def test_given_selected_kymas_when_reconcile_now_then_tasks_are_queued(admin_client, task_queue):
    kymas = KymaFactory.create_batch(2)
    task_queue()
    response = admin_client.post(
        reverse("admin:controlplane_kyma_changelist"),
        {"action": "reconcile_now", "_selected_action": [k.pk for k in kymas]},
        follow=True,
    )
    assert "Reconcile queued for 2 Kyma(s)" in response.content.decode()
    assert sorted(t.args[0] for t in task_queue()) == sorted(k.pk for k in kymas)


@pytest.mark.django_db(transaction=True)
def test_given_the_kyma_page_when_reconcile_now_is_pressed_then_one_task_is_queued(admin_client, task_queue):
    kyma = KymaFactory()
    page = admin_client.get(reverse("admin:controlplane_kyma_change", args=[kyma.pk])).content.decode()
    button_url = reverse("admin:controlplane_kyma_reconcile", args=[kyma.pk])
    assert f'action="{button_url}"' in page and 'id="cp-reconcile-now"' in page
    task_queue()
    response = admin_client.post(button_url, follow=True)
    assert response.redirect_chain[-1][0] == reverse("admin:controlplane_kyma_change", args=[kyma.pk])
    assert "Reconcile queued for 1 Kyma(s)" in response.content.decode()
    assert [t.args for t in task_queue()] == [[kyma.pk]]


def test_given_the_reconcile_url_when_misused_then_clear_refusals(admin_client, client, django_user_model):
    kyma = KymaFactory()
    url = reverse("admin:controlplane_kyma_reconcile", args=[kyma.pk])
    assert admin_client.get(url).status_code == 405
    assert admin_client.post(reverse("admin:controlplane_kyma_reconcile", args=[987654])).status_code == 404
    viewer = django_user_model.objects.create_user("viewer", password="viewer-password-123", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_kyma"))
    client.force_login(viewer)
    assert client.post(url).status_code == 403


def test_given_kyma_with_finalizer_when_deleted_in_admin_then_it_stays_deleting(admin_client):
    kyma = KymaFactory(finalizers=["operator.kyma-project.io/Kyma"])
    admin_client.post(reverse("admin:controlplane_kyma_delete", args=[kyma.pk]), {"post": "yes"})
    kyma.refresh_from_db()
    assert kyma.state == "Deleting"


def test_given_moduleconfig_when_staff_opens_it_then_it_is_read_only(admin_client, fleet):
    config = fleet["controlplane_moduleconfig"]
    assert admin_client.get(reverse("admin:controlplane_moduleconfig_add")).status_code == 403
    admin_client.post(reverse("admin:controlplane_moduleconfig_change", args=[config.pk]), {"spec": "{}"})
    assert ModuleConfig.objects.get(pk=config.pk).spec == {"x": 1}


def test_given_the_admin_then_it_names_the_product_not_django(admin_client):
    html = admin_client.get(reverse("admin:index")).content.decode()
    assert "Kyma fleet control plane" in html
    assert "Django administration" not in html and "Django site admin" not in html


def test_given_beat_tables_then_schedules_are_hidden_and_periodic_tasks_read_only(admin_client, settings):
    every = IntervalSchedule.objects.create(every=10, period=IntervalSchedule.SECONDS)
    name = next(iter(settings.CELERY_BEAT_SCHEDULE))
    task = PeriodicTask.objects.create(name=name, task="controlplane.kyma_reconcile_due", interval=every)

    index = admin_client.get(reverse("admin:index")).content.decode()
    assert "Intervals" not in index and "Crontabs" not in index and "Clocked" not in index
    for model in ("intervalschedule", "crontabschedule", "solarschedule", "clockedschedule"):
        assert admin_client.get(f"/admin/django_celery_beat/{model}/").status_code == 404
    page = admin_client.get(reverse("admin:django_celery_beat_periodictask_change", args=[task.pk]))
    assert page.status_code == 200 and "the code (CELERY_BEAT_SCHEDULE" in page.content.decode()
    assert 'name="_save"' not in page.content.decode()
    admin_client.post(
        reverse("admin:django_celery_beat_periodictask_change", args=[task.pk]), {"enabled": ""}
    )
    assert PeriodicTask.objects.get(pk=task.pk).enabled
    assert admin_client.get(reverse("admin:django_celery_beat_periodictask_add")).status_code == 403
    assert (
        admin_client.post(
            reverse("admin:django_celery_beat_periodictask_delete", args=[task.pk]), {"post": "yes"}
        ).status_code
        == 403
    )


def test_given_the_kyma_list_then_reason_modules_and_last_change_columns_sort(admin_client):
    KymaFactory(name="b-unreachable", state="Error", state_reason="Unreachable", modules=[{"name": "keda"}])
    KymaFactory(
        name="a-catalog",
        state="Error",
        state_reason="ModuleNotInCatalog",
        modules=[{"name": n} for n in ("istio", "keda", "serverless", "eventing", "nats")],
    )
    KymaFactory(name="c-ready", state="Ready", modules=[])
    url = reverse("admin:controlplane_kyma_changelist")
    listing = admin_client.get(url)
    html = listing.content.decode()
    headers = list(listing.context["cl"].list_display)
    assert {"reason_column", "modules_column", "last_change"} <= set(headers)
    assert "istio, keda, serverless +2" in html and 'title="istio, keda, serverless, eventing, nats"' in html
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC</time>", html)

    column = headers.index("reason_column")
    by_reason = admin_client.get(f"{url}?o={column}").context["cl"].result_list
    assert [k.name for k in by_reason] == ["c-ready", "a-catalog", "b-unreachable"]
    filtered = admin_client.get(f"{url}?reason=Unreachable").context["cl"].result_list
    assert [k.name for k in filtered] == ["b-unreachable"]
    by_change = admin_client.get(f"{url}?o=-{headers.index('last_change')}").context["cl"].result_list
    assert len(by_change) == 3


def test_given_reconcile_records_then_their_list_says_why_and_what_changed(admin_client):
    kyma = KymaFactory()
    record = ReconcileRecord.objects.create(
        kyma=kyma,
        started_at=timezone.now(),
        duration_ms=12,
        state="Ready",
        reason="periodic",
        changes=[{"kind": "spec", "field": "channel", "before": "regular", "after": "fast"}]
        + [{"kind": "applied", "resource": f"ConfigMap x/c{n}", "action": "created"} for n in range(6)],
    )
    html = admin_client.get(reverse("admin:controlplane_reconcilerecord_changelist")).content.decode()
    assert "<li>channel regular → fast</li>" in html and "<li>… 2 more</li>" in html and ">periodic<" in html
    detail = admin_client.get(reverse("admin:controlplane_reconcilerecord_change", args=[record.pk]))
    assert "ConfigMap x/c5 created" in detail.content.decode()


def test_given_a_kyma_being_deleted_when_its_form_is_saved_then_the_refusal_is_shown_with_the_input(
    admin_client,
):
    kyma = KymaFactory(finalizers=["operator.kyma-project.io/Kyma"], channel="regular")
    admin_client.post(reverse("admin:controlplane_kyma_delete", args=[kyma.pk]), {"post": "yes"})
    kyma.refresh_from_db()
    url = reverse("admin:controlplane_kyma_edit", args=[kyma.pk])
    form = admin_client.get(url).context["adminform"].form
    data = {name: form[name].value() for name in form.fields if form[name].value() is not None}
    data.update(channel="fast", labels="{}", annotations="{}", modules="[]")

    response = admin_client.post(url, data)

    assert response.status_code == 200
    page = response.content.decode()
    assert "is being deleted; it cannot be changed" in page
    assert 'value="fast"' in page or "fast</option>" in page  # the input is shown again
    kyma.refresh_from_db()
    assert (kyma.channel, kyma.state) == ("regular", "Deleting")
