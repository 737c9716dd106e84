"""A Module's admin page: credentials (add: key shown once; revoke), the manifest policy, the
configuration per runtime and the SyncResources' state across the fleet."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from fleet.models import ModuleCredential, SyncResource
from fleet.services import modules
from fleet.services.credentials import module_credential_create, module_credential_revoke
from kernel.api_tokens import api_token_create
from kernel.models import ApiToken
from tests.factories import KymaFactory, ModuleFactory, SyncResourceFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def keda():
    module = ModuleFactory(
        name="keda",
        manifest_namespaces=["kyma-system", "keda"],
        manifest_kinds=[{"group": "rbac.authorization.k8s.io", "kind": "ClusterRole"}],
    )
    for name, state in (("k-ready", "Ready"), ("k-broken", "Error")):
        kyma = KymaFactory(name=name, runtime_id=f"rt-{name}")
        config, _ = modules.moduleconfig_upsert(
            kyma=kyma, module=module, spec={"replicas": 2}, source_generation=1, source_resource_version="1"
        )
        modules.moduleconfig_set_status(config=config, status={"state": state, "message": f"{name} says hi"})
        resource = SyncResourceFactory(kyma=kyma, module=module, name=f"sync-{name}")
        entry = {"apiVersion": "v1", "kind": "ConfigMap", "name": "settings", "namespace": "kyma-system"}
        failed = {**entry, "state": "Failed", "message": "the runtime said no"}
        SyncResource.objects.filter(pk=resource.pk).update(
            manifest_status=[failed if state == "Error" else {**entry, "state": "Applied"}]
        )
    module_credential_create(module=module, name="manager-a")
    revoked, _ = module_credential_create(module=module, name="manager-old")
    module_credential_revoke(credential=revoked)
    return module


def page(admin_client, module) -> str:
    response = admin_client.get(reverse("admin:controlplane_module_change", args=[module.pk]))
    assert response.status_code == 200
    return response.content.decode()


def section(html: str, ident: str) -> str:
    start = html.index(f'id="{ident}"')
    return html[start : html.index("</fieldset>", start)]


def test_given_a_module_when_opening_its_page_then_credentials_policy_configs_and_syncs_show(
    admin_client, keda
):
    html = page(admin_client, keda)
    credentials = section(html, "cp-credentials")
    assert "manager-a" in credentials and "manager-old" in credentials
    assert "Active" in credentials and "Revoked" in credentials and "kcpm_" in credentials
    policy = section(html, "cp-policy")
    assert "<code>keda</code>" in policy and "ClusterRole (rbac.authorization.k8s.io)" in policy
    configs = section(html, "cp-configs")
    assert "kcp-system/k-ready" in configs and "k-broken says hi" in configs and "rt-k-broken" in configs
    syncs = section(html, "cp-syncs")
    assert syncs.index("sync-k-broken") < syncs.index("sync-k-ready")  # failures first
    assert "ConfigMap settings: the runtime said no" in syncs


def test_given_no_policy_when_opening_the_page_then_the_default_is_explained(admin_client):
    module = ModuleFactory(name="plain")
    policy = section(page(admin_client, module), "cp-policy")
    assert "<code>kyma-system</code>" in policy and "by default" in policy
    assert "none: no cluster-scoped or unknown kind is allowed" in policy


def test_given_staff_when_adding_a_credential_in_the_admin_then_the_key_is_shown_once_and_works(
    admin_client, keda
):
    add = reverse("admin:controlplane_modulecredential_add")
    assert "selected>keda</option>" in admin_client.get(f"{add}?module={keda.pk}").content.decode()
    response = admin_client.post(add, {"module": keda.pk, "name": "manager-b", "expires_at": ""}, follow=True)
    html = response.content.decode()
    key = re.search(r"<code>(kcpm_[A-Za-z0-9_-]+)</code>", html).group(1)
    credential = ModuleCredential.objects.get(name="manager-b")
    assert credential.created_by.username == "root" and key.startswith(credential.prefix)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    assert client.get("/api/v1/moduleconfigs/").status_code == 200
    again = admin_client.get(reverse("admin:controlplane_modulecredential_change", args=[credential.pk]))
    assert key not in again.content.decode()


def test_given_the_module_page_when_revoke_is_pressed_then_the_credential_is_revoked(admin_client, keda):
    credential = ModuleCredential.objects.get(name="manager-a")
    html = page(admin_client, keda)
    url = reverse("admin:controlplane_modulecredential_revoke", args=[credential.pk])
    assert f'action="{url}"' in html
    assert admin_client.get(url).status_code == 405
    response = admin_client.post(url, {"next": "module"})
    assert response.status_code == 302
    assert response["Location"] == reverse("admin:controlplane_module_change", args=[keda.pk])
    credential.refresh_from_db()
    assert credential.revoked_at is not None


def test_given_a_policy_when_edited_in_the_module_form_then_it_is_stored(admin_client, keda):
    url = reverse("admin:controlplane_module_change", args=[keda.pk])
    form = admin_client.get(url).context["adminform"].form
    data = {name: form[name].value() for name in form.fields if form[name].value() is not None}
    data.update(
        manifest_namespaces='["keda"]',
        manifest_kinds="[]",
        channels='{"regular": "1.0.0"}',
        default_cr='{"spec": {"replicas": 1}}',
        labels="{}",
        annotations="{}",
    )
    response = admin_client.post(url, data)
    assert response.status_code == 302, response.context["adminform"].form.errors
    keda.refresh_from_db()
    assert keda.manifest_namespaces == ["keda"] and keda.manifest_kinds == []
    bad = admin_client.post(url, {**data, "manifest_namespaces": '["Bad_Name"]', "opened_version": ""})
    assert bad.status_code == 200, bad
    assert "namespaces[0]: &#x27;Bad_Name&#x27; must be a DNS label" in bad.content.decode()


def test_given_api_tokens_when_revoked_in_the_admin_then_they_stop_working(admin_client, admin_user):
    token, key = api_token_create(user=admin_user, name="ci")
    response = admin_client.post(
        reverse("admin:kernel_apitoken_changelist"), {"action": "revoke", "_selected_action": [token.pk]}
    )
    assert response.status_code == 302
    assert ApiToken.objects.get(pk=token.pk).revoked_at is not None
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    answer = client.get("/api/v1/kymas/")
    assert answer.status_code == 401 and answer.json()["detail"].startswith("token revoked on ")
