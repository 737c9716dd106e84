"""Who did what: every write through every door (admin, API, ``manage.py``, module credentials,
tokens) is recorded with its actor, time, source address, object and a diff with secrets
redacted; refused writes with their reason. Shown on the Kyma page and each object's history,
served read-only by the API with filters, kept ``AUDIT_KEPT_DAYS``."""

from __future__ import annotations

import datetime as dt
import io
import json
from pathlib import Path

import pytest
import yaml
from cryptography.fernet import Fernet
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from fleet.models import Kyma, SyncResource
from fleet.services import kymas as kyma_services
from fleet.services.credentials import module_credential_create
from kernel.api_tokens import api_token_create
from kernel.models import AuditEntry
from kernel.tasks import audit_prune
from tests.factories import KymaFactory, ModuleFactory

pytestmark = pytest.mark.django_db

OPERATOR = "operator.kyma-project.io/v1beta2"
SECRET_TOKEN = "sha256~super-secret-runtime-token-0123456789"
KUBECONFIG = f"""\
apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: "https://c.example.com"}}}}]
users: [{{name: u, user: {{token: {SECRET_TOKEN}}}}}]
contexts: [{{name: x, context: {{cluster: c, user: u}}}}]
current-context: x
"""
SECRET_MANIFEST = """\
apiVersion: v1
kind: Secret
metadata: {name: creds, namespace: kyma-system}
stringData: {password: hunter2-very-secret}
"""


@pytest.fixture
def token_client(admin_user):
    _, key = api_token_create(user=admin_user, name="ci-deploy")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}", REMOTE_ADDR="203.0.113.7")
    return client


def kyma_doc(name: str, channel: str = "regular", **metadata) -> dict:
    return {
        "apiVersion": OPERATOR,
        "kind": "Kyma",
        "metadata": {"name": name, "namespace": "kcp-system", **metadata},
        "spec": {"channel": channel},
    }


def everything_recorded() -> str:
    return json.dumps(list(AuditEntry.objects.values()), default=str)


class TestWritesThroughTheApi:
    def test_given_a_token_changes_a_kyma_then_who_when_from_where_and_the_diff_are_recorded(
        self, token_client
    ):
        assert token_client.post("/api/v1/kymas/", kyma_doc("c-1"), format="json").status_code == 201
        before = timezone.now()
        assert token_client.post("/api/v1/kymas/", kyma_doc("c-1", "fast"), format="json").status_code == 200

        created = AuditEntry.objects.get(kind="Kyma", action="create")
        assert "kubeconfig" not in {c["field"] for c in created.changes}  # nothing set, nothing said
        entry = AuditEntry.objects.get(kind="Kyma", action="update")
        assert (entry.actor, entry.credential, entry.via, entry.source) == (
            "root",
            "API token ci-deploy",
            "api",
            "203.0.113.7",
        )
        assert entry.at >= before
        assert entry.request == "POST /api/v1/kymas/"
        assert (entry.namespace, entry.name, entry.uid) == ("kcp-system", "c-1", str(Kyma.objects.get().uid))
        assert {"field": "channel", "before": "regular", "after": "fast"} in entry.changes
        assert entry.kyma_id == Kyma.objects.get().pk

    def test_given_a_write_that_changes_nothing_then_nothing_is_recorded(self, token_client):
        token_client.post("/api/v1/kymas/", kyma_doc("c-1"), format="json")
        token_client.post("/api/v1/kymas/", kyma_doc("c-1"), format="json")

        assert AuditEntry.objects.filter(kind="Kyma").count() == 1  # the create

    def test_given_a_kubeconfig_set_and_cleared_then_recorded_redacted(self, token_client):
        kyma = KymaFactory(name="c-1")
        url = f"/api/v1/kymas/{kyma.uid}/kubeconfig/"
        assert token_client.put(url, {"kubeconfig": KUBECONFIG}, format="json").status_code == 204
        assert token_client.delete(url).status_code == 204

        changes = [e.changes[0] for e in AuditEntry.objects.filter(kind="Kyma").order_by("id")]
        assert changes[0] == {"field": "kubeconfig", "before": "<not set>", "after": "<replaced, redacted>"}
        assert changes[1]["after"] == "<not set>"
        assert SECRET_TOKEN not in everything_recorded()

    def test_given_a_delete_then_recorded(self, token_client):
        kyma = KymaFactory(name="c-1")

        assert token_client.delete(f"/api/v1/kymas/{kyma.uid}/").status_code in (202, 204)

        assert AuditEntry.objects.get(action="delete").name == "c-1"


class TestModuleCredentials:
    def test_given_a_manager_writes_a_syncresource_then_the_module_and_credential_are_the_actor(self):
        kyma = KymaFactory(name="c-1")
        module = ModuleFactory(name="keda")
        from fleet.models import ModuleConfig

        ModuleConfig.objects.create(kyma=kyma, module=module, namespace=kyma.namespace, name="c-1-keda")
        _, key = module_credential_create(module=module, name="keda-manager")
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
        doc = {
            "apiVersion": "controlplane.kyma-project.io/v1alpha1",
            "kind": "SyncResource",
            "metadata": {"name": "c-1-keda", "namespace": "kcp-system"},
            "spec": {"kyma": "c-1", "module": "keda", "manifests": SECRET_MANIFEST},
        }

        assert client.post("/api/v1/syncresources/", doc, format="json").status_code == 201, "write refused"

        entry = AuditEntry.objects.get(kind="SyncResource")
        assert (entry.actor, entry.credential) == ("module:keda", "module credential keda/keda-manager")
        assert entry.kyma_id == kyma.pk
        manifests = next(c for c in entry.changes if c["field"] == "manifests")
        assert manifests["after"].startswith("<") and "sha256" in manifests["after"]
        assert "hunter2" not in everything_recorded()
        assert SyncResource.objects.count() == 1

    def test_given_credentials_and_tokens_created_and_revoked_then_recorded_without_keys(self, api):
        module = ModuleFactory(name="keda")

        created = api.post(
            f"/api/v1/modules/{module.name}/credentials/", {"name": "keda-manager"}, format="json"
        )
        revoked = api.post(f"/api/v1/modules/{module.name}/credentials/keda-manager/revoke/")

        assert (created.status_code, revoked.status_code) == (201, 200)
        entries = list(AuditEntry.objects.filter(kind="ModuleCredential").order_by("id"))
        assert [(e.action, e.namespace, e.name) for e in entries] == [
            ("create", "keda", "keda-manager"),
            ("revoke", "keda", "keda-manager"),
        ]
        assert created.json()["token"] not in everything_recorded()


class TestRefusedWrites:
    def test_given_an_invalid_document_then_a_refused_entry_with_the_reason(self, token_client):
        response = token_client.post("/api/v1/kymas/", kyma_doc("c-1", "NOT-A-CHANNEL"), format="json")

        assert response.status_code == 400
        entry = AuditEntry.objects.get()
        assert (entry.outcome, entry.action, entry.kind, entry.name) == ("refused", "create", "Kyma", "c-1")
        assert "spec.channel" in entry.reason
        assert not Kyma.objects.exists()

    def test_given_a_stale_version_then_refused_with_the_conflict(self, token_client):
        kyma = KymaFactory(name="c-1")
        Kyma.objects.filter(pk=kyma.pk).update(resource_version=5)

        response = token_client.put(
            f"/api/v1/kymas/{kyma.uid}/", kyma_doc("c-1", "fast", resourceVersion="1"), format="json"
        )

        assert response.status_code == 409
        entry = AuditEntry.objects.get(outcome="refused")
        assert "the object has been modified" in entry.reason and entry.action == "update"

    def test_given_a_user_without_permission_then_refused_with_the_reason(self, user_with):
        client = user_with("controlplane.view_kyma")

        response = client.post("/api/v1/kymas/", kyma_doc("c-1"), format="json")

        assert response.status_code == 403
        assert AuditEntry.objects.get().outcome == "refused"

    def test_given_an_admin_form_refused_then_recorded_with_its_errors(self, admin_client):
        kyma = KymaFactory(name="c-1")
        form = {
            "namespace": "kcp-system",
            "name": "c-1",
            "runtime_id": kyma.runtime_id,
            "skr_domain": "",
            "channel": "NOT A CHANNEL",
            "modules": "[]",
            "labels": "{}",
            "annotations": "{}",
            "opened_version": kyma.resource_version,
        }

        assert (
            admin_client.post(reverse("admin:controlplane_kyma_edit", args=[kyma.pk]), form).status_code
            == 200
        )

        entry = AuditEntry.objects.get()
        assert (entry.outcome, entry.via, entry.actor, entry.uid) == (
            "refused",
            "admin",
            "root",
            str(kyma.uid),
        )
        assert "channel" in entry.reason

    def test_given_a_failing_multi_document_apply_then_one_refused_entry_per_document(self, token_client):
        docs = [kyma_doc("good"), kyma_doc("bad", "X")]

        assert token_client.post("/api/v1/apply/", docs, format="json").status_code == 400

        entries = list(AuditEntry.objects.all())
        assert [(e.outcome, e.action, e.name) for e in entries] == [("refused", "apply", "bad")]
        assert not Kyma.objects.exists()


class TestCommands:
    def test_given_manage_py_apply_then_the_command_and_os_user_are_recorded(self, tmp_path: Path):
        path = tmp_path / "k.yaml"
        path.write_text(yaml.safe_dump(kyma_doc("c-1")))

        call_command("apply", "-f", str(path), stdout=io.StringIO(), stderr=io.StringIO())

        entry = AuditEntry.objects.get()
        assert entry.via == "command" and entry.actor and entry.source
        assert entry.request == f"manage.py apply -f {path}"

    def test_given_a_refused_apply_then_recorded_with_the_reason(self, tmp_path: Path):
        path = tmp_path / "k.yaml"
        path.write_text(yaml.safe_dump(kyma_doc("c-1", "X")))

        with pytest.raises(CommandError):
            call_command("apply", "-f", str(path), stdout=io.StringIO(), stderr=io.StringIO())

        entry = AuditEntry.objects.get()
        assert (entry.outcome, entry.kind, entry.name, entry.via) == ("refused", "Kyma", "c-1", "command")
        assert "spec.channel" in entry.reason

    def test_given_a_token_created_by_command_then_recorded(self, admin_user):
        call_command("token", "create", "root", "ci", stdout=io.StringIO(), stderr=io.StringIO())

        entry = AuditEntry.objects.get(kind="ApiToken")
        assert (entry.via, entry.action, entry.namespace, entry.name) == ("command", "create", "root", "ci")

    def test_given_reencrypt_then_one_entry_per_model_with_its_row_count_and_no_secret(self, settings):
        kyma = KymaFactory(name="c-1")
        kyma.kubeconfig = KUBECONFIG
        kyma.save()
        new_key = Fernet.generate_key().decode()
        settings.ENCRYPTION_KEYS = [new_key, *settings.ENCRYPTION_KEYS]

        call_command("reencrypt", stdout=io.StringIO())

        entry = AuditEntry.objects.get()
        assert (entry.action, entry.kind, entry.via, entry.request) == (
            "reencrypt",
            "Kyma",
            "command",
            "manage.py reencrypt",
        )
        assert entry.changes == [{"field": "rows", "before": None, "after": 1}]
        assert SECRET_TOKEN not in everything_recorded()

    def test_given_render_gateway_makes_the_pki_then_recorded_as_the_commands(self, settings):
        settings.LISTENER_HOSTNAMES = ["listener.example.com"]

        call_command(
            "render_gateway",
            "--host",
            "listener.example.com",
            "--with-credential",
            stdout=io.StringIO(),
            stderr=io.StringIO(),
        )
        call_command(
            "render_gateway",
            "--host",
            "listener.example.com",
            "--with-credential",
            stdout=io.StringIO(),
            stderr=io.StringIO(),
        )  # both current: nothing written

        made = list(AuditEntry.objects.order_by("id").values_list("action", "kind", "via"))
        assert made == [
            ("create", "CertificateAuthority", "command"),
            ("issue", "Certificate", "command"),
        ]


class TestShown:
    def test_given_admin_and_api_writes_then_the_kyma_page_timeline_and_history_show_them(
        self, admin_client, token_client
    ):
        token_client.post("/api/v1/kymas/", kyma_doc("c-1"), format="json")
        kyma = Kyma.objects.get()
        form = {
            "namespace": "kcp-system",
            "name": "c-1",
            "runtime_id": kyma.runtime_id,
            "skr_domain": "",
            "channel": "fast",
            "modules": "[]",
            "labels": "{}",
            "annotations": "{}",
            "opened_version": kyma.resource_version,
        }
        assert (
            admin_client.post(reverse("admin:controlplane_kyma_edit", args=[kyma.pk]), form).status_code
            == 302
        )

        page = admin_client.get(reverse("admin:controlplane_kyma_change", args=[kyma.pk])).content.decode()
        history = admin_client.get(
            reverse("admin:controlplane_kyma_history", args=[kyma.pk])
        ).content.decode()

        assert page.count("cp-timeline-change") == 2
        assert "channel: regular → fast" in page and "by root via admin" in page
        assert "by root (API token ci-deploy) via api" in page
        assert history.count("cp-audit-done") == 2 and "API token ci-deploy" in history

    def test_given_entries_then_the_api_serves_them_read_only_with_filters(self, api, token_client):
        token_client.post("/api/v1/kymas/", kyma_doc("c-1"), format="json")
        token_client.post("/api/v1/kymas/", kyma_doc("c-2"), format="json")
        token_client.post("/api/v1/kymas/", kyma_doc("c-3", "X"), format="json")

        one = api.get("/api/v1/audit/?kyma=kcp-system/c-1").json()
        refused = api.get("/api/v1/audit/?outcome=refused").json()
        by_actor = api.get("/api/v1/audit/?actor=root&credential=ci-deploy&via=api").json()
        later = api.get("/api/v1/audit/?since=2999-01-01T00:00:00Z").json()

        assert [e["name"] for e in one["results"]] == ["c-1"]
        assert [e["name"] for e in refused["results"]] == ["c-3"]
        assert by_actor["count"] == 3 and later["count"] == 0
        assert api.post("/api/v1/audit/", {}, format="json").status_code == 405
        assert api.get("/api/v1/audit/?since=yesterday").status_code == 400

    def test_given_a_user_without_the_view_permission_then_403(self, user_with):
        assert user_with("controlplane.view_kyma").get("/api/v1/audit/").status_code == 403

    def test_the_audit_api_is_in_the_openapi_schema_with_its_filters(self, api):
        schema = yaml.safe_load(api.get("/api/schema/").content)

        parameters = {p["name"] for p in schema["paths"]["/api/v1/audit/"]["get"]["parameters"]}
        assert {"kind", "kyma", "actor", "via", "outcome", "since", "until"} <= parameters


class TestWhatIsNotAWriteOfADoor:
    def test_given_the_control_plane_writes_by_itself_then_nothing_is_recorded(self):
        kyma = KymaFactory(name="c-1")
        kyma.channel = "fast"

        kyma_services.kyma_save(kyma=kyma)  # as the reconcile adopting a runtime edit: no door acting

        assert not AuditEntry.objects.exists()


class TestRetention:
    def test_given_old_and_new_entries_then_the_periodic_task_prunes_only_the_old(self, settings):
        settings.AUDIT_KEPT_DAYS = 30
        now = timezone.now()
        for days in (40, 31, 29, 1):
            AuditEntry.objects.create(actor="a", via="api", action="update", at=now - dt.timedelta(days=days))

        assert audit_prune() == 2

        assert sorted((now - e.at).days for e in AuditEntry.objects.all()) == [1, 29]

    def test_the_prune_is_scheduled_by_beat(self):
        assert settings.CELERY_BEAT_SCHEDULE["audit-prune"]["task"] == "kernel.audit_prune"
