"""The guards around the doors: bindings declared and audited, every Kyma model scoped, failed
logins limited, sessions that end, refused admin writes in the trail, unauthenticated refusals
counted and sampled."""

from __future__ import annotations

import io
import time

import pytest
from django.apps import apps
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.db import models
from django.test import Client
from prometheus_client import REGISTRY
from rest_framework.test import APIClient

from access.admin_scope import ScopedAdminMixin
from access.models import FleetRoleBinding
from access.scope import SCOPED
from access.sessions import SEEN
from fleet.models import Kyma
from kernel.models import AuditEntry

BINDING_YAML = """
apiVersion: access.kyma-controlplane.io/v1alpha1
kind: FleetRoleBinding
metadata:
  name: eu-operators
spec:
  role: operator
  groups: [eu-operators]
  selector:
    matchLabels:
      kyma-project.io/region: eu-west-1
"""


def test_every_model_of_a_kyma_is_declared_and_every_admin_of_one_is_scoped():
    pointing = {
        model._meta.label_lower
        for model in apps.get_models()
        for field in model._meta.concrete_fields
        if isinstance(field, models.ForeignKey) and field.related_model is Kyma
    }
    assert pointing - set(SCOPED) == set(), "a model with a Kyma is not in access.scope.SCOPED"
    unscoped = [
        model._meta.label_lower
        for model, model_admin in admin.site._registry.items()
        if model._meta.label_lower in SCOPED and not isinstance(model_admin, ScopedAdminMixin)
    ]
    assert unscoped == []


@pytest.mark.django_db
def test_bindings_apply_from_yaml_and_every_change_is_in_the_trail(tmp_path):
    path = tmp_path / "bindings.yaml"
    path.write_text(BINDING_YAML)
    call_command("apply", "-f", str(path), stdout=io.StringIO())
    binding = FleetRoleBinding.objects.get(name="eu-operators")
    assert (binding.role, binding.groups) == ("operator", ["eu-operators"])
    path.write_text(BINDING_YAML.replace("role: operator", "role: viewer"))
    call_command("apply", "-f", str(path), stdout=io.StringIO())
    entries = AuditEntry.objects.filter(kind="FleetRoleBinding", name="eu-operators").order_by("at", "id")
    assert [(e.action, e.via) for e in entries] == [("create", "command"), ("update", "command")]
    assert {"field": "role", "before": "operator", "after": "viewer"} in entries[1].changes


@pytest.mark.django_db
def test_bindings_through_the_api_need_the_whole_fleet(api):
    doc = {
        "apiVersion": "access.kyma-controlplane.io/v1alpha1",
        "kind": "FleetRoleBinding",
        "metadata": {"name": "support"},
        "spec": {"role": "viewer", "groups": ["support"]},
    }
    assert api.post("/api/v1/fleetrolebindings/", doc, format="json").status_code == 201
    assert AuditEntry.objects.filter(
        kind="FleetRoleBinding", name="support", action="create", via="api"
    ).exists()
    bad = api.post("/api/v1/fleetrolebindings/", {**doc, "spec": {"role": "god"}}, format="json")
    assert bad.status_code == 400 and bad.json()["errors"][0]["field"] == "spec.role"
    user = get_user_model().objects.create_user("eu-admin", password="pw-123456789")
    FleetRoleBinding.objects.create(
        name="eu-admins", role="fleet-admin", users=["eu-admin"], selector={"matchLabels": {"r": "eu"}}
    )
    scoped = APIClient()
    scoped.force_authenticate(user)
    widen = {**doc, "metadata": {"name": "me"}, "spec": {"role": "fleet-admin", "users": ["eu-admin"]}}
    assert scoped.post("/api/v1/fleetrolebindings/", widen, format="json").status_code == 403
    assert not FleetRoleBinding.objects.filter(name="me").exists()


@pytest.mark.django_db
def test_failed_logins_lock_out_the_account_and_the_address(django_user_model, settings):
    django_user_model.objects.create_superuser("root", "root@example.com", "root-password-123")
    browser = Client(REMOTE_ADDR="10.9.8.7")
    for _ in range(settings.AXES_FAILURE_LIMIT):
        answer = browser.post("/admin/login/", {"username": "root", "password": "wrong"})
        assert answer.status_code in (200, 429)
    locked = browser.post(
        "/admin/login/", {"username": "root", "password": "root-password-123"}, HTTP_ACCEPT="text/html"
    )
    assert locked.status_code == 429 and b"Locked out" in locked.content
    elsewhere = Client(REMOTE_ADDR="10.1.1.1")  # the account is locked from every address
    assert (
        elsewhere.post("/admin/login/", {"username": "root", "password": "root-password-123"}).status_code
        == 429
    )
    same_address = Client(REMOTE_ADDR="10.9.8.7")  # and the address for every account
    assert same_address.post("/admin/login/", {"username": "other", "password": "x"}).status_code == 429
    from axes.models import AccessAttempt

    assert AccessAttempt.objects.filter(username="root").exists()
    viewer = Client()
    viewer.force_login(django_user_model.objects.get(username="root"))
    assert viewer.get("/admin/axes/accessattempt/").status_code == 200  # visible to admins


@pytest.mark.django_db
def test_an_idle_session_ends(django_user_model, settings):
    user = django_user_model.objects.create_superuser("root", "root@example.com", "root-password-123")
    client = Client()
    client.force_login(user)
    assert client.get("/admin/").status_code == 200
    session = client.session
    session[SEEN] = time.time() - settings.SESSION_IDLE_SECONDS - 1
    session.save()
    assert client.get("/admin/").status_code == 302  # back to the login page


@pytest.mark.django_db
def test_a_refused_admin_write_is_in_the_trail(django_user_model):
    root = django_user_model.objects.create_superuser("root", "root@example.com", "root-password-123")
    entry = AuditEntry.objects.create(actor="x", action="update", kind="Module", name="keda")
    client = Client()
    client.force_login(root)
    answer = client.post(f"/admin/kernel/auditentry/{entry.pk}/change/", {"actor": "forged"})
    assert answer.status_code == 403
    refused = AuditEntry.objects.get(actor="root", outcome="refused")
    assert (refused.via, refused.action, refused.kind) == ("admin", "update", "AuditEntry")


def counter(name: str, door: str) -> float:
    return REGISTRY.get_sample_value(name, {"door": door}) or 0.0


@pytest.mark.django_db
def test_unauthenticated_refusals_are_counted_and_sampled_into_the_trail(settings):
    settings.AUDIT_UNAUTHENTICATED_PER_MINUTE = 3
    before = counter("controlplane_unauthenticated_refusals_total", "api")
    client = APIClient()
    for _ in range(10):
        assert client.post("/api/v1/kymas/", {}, format="json").status_code == 401
    assert counter("controlplane_unauthenticated_refusals_total", "api") - before == 10
    assert AuditEntry.objects.filter(actor="anonymous").count() == 3
    assert counter("controlplane_unauthenticated_refusals_unrecorded_total", "api") >= 7


@pytest.mark.django_db
def test_a_service_accounts_token_acts_with_its_bindings_rights():
    from kernel.api_tokens import api_token_create
    from tests.factories import KymaFactory

    out = io.StringIO()
    call_command("serviceaccount", "create", "ci", stdout=out)
    assert out.getvalue().strip() == "sa-ci"
    KymaFactory(name="eu-1", labels={"region": "eu"})
    KymaFactory(name="us-1", labels={"region": "us"})
    FleetRoleBinding.objects.create(
        name="ci", role="viewer", users=["sa-ci"], selector={"matchLabels": {"region": "eu"}}
    )
    _, key = api_token_create(user=get_user_model().objects.get(username="sa-ci"), name="deploy")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    assert [d["metadata"]["name"] for d in client.get("/api/v1/kymas/").json()["results"]] == ["eu-1"]
    assert client.post("/api/v1/kymas/kcp-system/eu-1/reconcile/").status_code == 403
    with pytest.raises(CommandError):
        call_command("serviceaccount", "create", "ci", stdout=io.StringIO())
