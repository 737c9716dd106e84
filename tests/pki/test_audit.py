"""Who touched the PKI: a certificate renewed with the admin's *Renew now*, the CA rotated from the
admin, ``manage.py pki bootstrap``, ``rotate-ca`` and ``issue`` are audit entries with the actor,
the fingerprint made and the one replaced; a refused one with its reason. Never a private key.
The control plane's own issuing (a reconcile, beat) has no actor and is not recorded."""

from __future__ import annotations

import datetime as dt
import io
import json
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.urls import reverse
from django.utils import timezone

from kernel.models import AuditEntry
from pki import crypto, selectors, services
from pki.models import Certificate, CertificateAuthority, CertificatePurpose
from tests.factories import KymaFactory

pytestmark = pytest.mark.django_db


def run(*args: str) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def no_private_key_recorded() -> bool:
    recorded = json.dumps(list(AuditEntry.objects.values()), default=str)
    keys = [
        m.private_key.reveal_bytes().decode()
        for m in [*CertificateAuthority.objects.all(), *Certificate.objects.all()]
    ]
    bodies = [line for key in keys for line in key.splitlines() if line and not line.startswith("-----")]
    return not any(body in recorded for body in bodies)


def fingerprints(entry: AuditEntry) -> tuple[str | None, str]:
    change = next(c for c in entry.changes if c["field"] == "fingerprint")
    return change["before"], change["after"]


@pytest.fixture
def issued() -> Certificate:
    services.ca_bootstrap()
    services.listener_certificate()
    return services.certificate_for_kyma(kyma=KymaFactory(name="c-1"))  # no door acting: not recorded


class TestAdmin:
    def test_given_renew_now_on_a_runtime_certificate_then_recorded_as_the_admin_with_both_fingerprints(
        self, admin_client, issued
    ):
        admin_client.post(
            reverse("admin:pki_certificate_changelist"), {"action": "renew", "_selected_action": [issued.pk]}
        )

        new = Certificate.objects.get(kyma=issued.kyma, superseded_at__isnull=True)
        entry = AuditEntry.objects.get()
        assert (entry.action, entry.kind, entry.actor, entry.via) == ("renew", "Certificate", "root", "admin")
        assert (entry.name, entry.uid, entry.kyma_id) == (new.common_name, str(new.uid), issued.kyma_id)
        assert fingerprints(entry) == (issued.fingerprint, new.fingerprint)
        assert no_private_key_recorded()
        history = admin_client.get(reverse("admin:pki_certificate_history", args=[new.pk])).content.decode()
        assert "cp-audit-done" in history and new.fingerprint in history

    def test_given_renew_now_on_the_listener_certificate_then_recorded(self, admin_client, issued):
        listener = Certificate.objects.get(purpose=CertificatePurpose.LISTENER, superseded_at__isnull=True)

        admin_client.post(
            reverse("admin:pki_certificate_changelist"),
            {"action": "renew", "_selected_action": [listener.pk]},
        )

        entry = AuditEntry.objects.get()
        assert (entry.action, entry.kind, entry.actor) == ("renew", "Certificate", "root")
        assert fingerprints(entry)[0] == listener.fingerprint
        assert no_private_key_recorded()

    def test_given_renew_now_refused_then_recorded_with_the_reason(self, admin_client, issued):
        type(issued.kyma).objects.filter(pk=issued.kyma_id).update(skr_domain="")

        admin_client.post(
            reverse("admin:pki_certificate_changelist"), {"action": "renew", "_selected_action": [issued.pk]}
        )

        entry = AuditEntry.objects.get()
        assert (entry.outcome, entry.action, entry.uid) == ("refused", "renew", str(issued.uid))
        assert "skr_domain" in entry.reason

    def test_given_the_ca_rotated_from_the_admin_then_recorded_with_the_ca_it_replaces(
        self, admin_client, issued
    ):
        old = selectors.issuing_authority()

        admin_client.post(reverse("admin:pki_certificateauthority_rotate"))

        new = CertificateAuthority.objects.exclude(pk=old.pk).get()
        entry = AuditEntry.objects.get()
        assert (entry.action, entry.kind, entry.actor, entry.uid) == (
            "rotate",
            "CertificateAuthority",
            "root",
            str(new.uid),
        )
        assert fingerprints(entry) == (old.fingerprint, new.fingerprint)
        assert no_private_key_recorded()


class TestCommands:
    def test_given_bootstrap_then_the_new_ca_is_recorded_as_the_commands_once(self):
        run("pki", "bootstrap")
        run("pki", "bootstrap")  # already present: nothing written, nothing recorded

        entry = AuditEntry.objects.get()
        assert (entry.action, entry.kind, entry.via, entry.request) == (
            "create",
            "CertificateAuthority",
            "command",
            "manage.py pki bootstrap",
        )
        assert no_private_key_recorded()

    def test_given_an_imported_ca_then_recorded_as_an_import(self, tmp_path: Path):
        pair = crypto.create_ca(common_name="corp", now=timezone.now(), validity=dt.timedelta(days=30))
        (tmp_path / "ca.crt").write_bytes(pair.certificate_pem)
        (tmp_path / "ca.key").write_bytes(pair.private_key_pem)

        run(
            "pki",
            "bootstrap",
            "--import-cert",
            str(tmp_path / "ca.crt"),
            "--import-key",
            str(tmp_path / "ca.key"),
        )

        entry = AuditEntry.objects.get()
        assert (entry.action, entry.name, entry.via) == ("import", "corp", "command")
        assert entry.request.startswith(f"manage.py pki bootstrap --import-cert {tmp_path / 'ca.crt'}")
        assert no_private_key_recorded()

    def test_given_rotate_ca_then_recorded(self, issued):
        run("pki", "rotate-ca", "--yes")

        entry = AuditEntry.objects.get()
        assert (entry.action, entry.kind, entry.via) == ("rotate", "CertificateAuthority", "command")

    def test_given_issue_and_issue_renew_then_recorded_as_issue_then_renew(self, tmp_path: Path):
        kyma = KymaFactory(name="c-1")

        run("pki", "issue", "kcp-system/c-1", "--out", str(tmp_path))
        run("pki", "issue", "kcp-system/c-1", "--out", str(tmp_path))  # current: nothing written
        run("pki", "issue", "kcp-system/c-1", "--out", str(tmp_path), "--renew")

        entries = AuditEntry.objects.filter(kind="Certificate").order_by("id")
        assert [(e.action, e.via, e.kyma_id) for e in entries] == [
            ("issue", "command", kyma.pk),
            ("renew", "command", kyma.pk),
        ]
        assert entries[1].request == f"manage.py pki issue kcp-system/c-1 --out {tmp_path} --renew"
        assert AuditEntry.objects.filter(kind="CertificateAuthority", action="create").count() == 1
        assert no_private_key_recorded()

    def test_given_a_refused_issue_then_recorded_with_the_reason(self, tmp_path: Path):
        KymaFactory(name="c-1", skr_domain="")

        with pytest.raises(CommandError):
            run("pki", "issue", "kcp-system/c-1", "--out", str(tmp_path))

        entry = AuditEntry.objects.get()
        assert (entry.outcome, entry.action, entry.kind, entry.via) == (
            "refused",
            "issue",
            "Certificate",
            "command",
        )
        assert "skr_domain" in entry.reason


def test_given_the_control_plane_issuing_by_itself_then_nothing_is_recorded():
    services.ca_bootstrap()
    kyma = KymaFactory(name="c-1")
    services.certificate_issue_for_kyma(kyma=kyma)
    services.certificates_renew_due(now=timezone.now() + dt.timedelta(days=3650))

    assert not AuditEntry.objects.exists()
