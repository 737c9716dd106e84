"""Admin pages for a logged-in staff user: lists, forms, write-only secrets, actions, deletes."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission
from django.urls import reverse

from fleet.models import Kyma, ModuleConfig
from fleet.services import modules
from tests.factories import KymaFactory, ModuleFactory, SyncResourceFactory, WatcherFactory
from tests.fleet.test_api import KUBECONFIG

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
