"""PKI commands, admin pages and the read-only API (never a private key anywhere)."""

from __future__ import annotations

import datetime as dt
import io
import stat
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.urls import reverse

from pki import crypto, services
from pki.models import Certificate, CertificateAuthority
from tests.factories import KymaFactory

pytestmark = pytest.mark.django_db


def run(*args: str) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


class TestCommands:
    def test_given_nothing_when_bootstrap_twice_then_created_then_already_present(self):
        assert "CA created" in run("pki", "bootstrap")
        assert "already present" in run("pki", "bootstrap")
        assert CertificateAuthority.objects.count() == 1

    def test_given_ca_files_when_importing_then_imported(self, tmp_path: Path):
        from django.utils import timezone

        pair = crypto.create_ca(common_name="corp", now=timezone.now(), validity=dt.timedelta(days=30))
        (tmp_path / "ca.crt").write_bytes(pair.certificate_pem)
        (tmp_path / "ca.key").write_bytes(pair.private_key_pem)
        assert "CA imported: corp" in run(
            "pki",
            "bootstrap",
            "--import-cert",
            str(tmp_path / "ca.crt"),
            "--import-key",
            str(tmp_path / "ca.key"),
        )

    def test_given_only_a_cert_when_importing_then_a_clear_error(self, tmp_path: Path):
        with pytest.raises(CommandError, match="go together"):
            run("pki", "bootstrap", "--import-cert", str(tmp_path / "x"))

    def test_given_a_kyma_when_issuing_then_three_files_with_a_private_key_file_mode(self, tmp_path: Path):
        kyma = KymaFactory()
        assert "wrote ca.crt, tls.crt, tls.key" in run(
            "pki", "issue", f"{kyma.namespace}/{kyma.name}", "--out", str(tmp_path)
        )
        assert stat.S_IMODE((tmp_path / "tls.key").stat().st_mode) == 0o600
        cert = crypto.load_certificate((tmp_path / "tls.crt").read_bytes())
        crypto.verify_client(
            cert,
            crypto.load_certificates((tmp_path / "ca.crt").read_bytes()),
            now=cert.not_valid_before_utc + dt.timedelta(minutes=10),
        )

    def test_given_a_kyma_without_skr_domain_when_issuing_then_the_error_says_why(self, tmp_path: Path):
        kyma = KymaFactory(skr_domain="")
        with pytest.raises(CommandError, match="has no skr_domain"):
            run("pki", "issue", f"{kyma.namespace}/{kyma.name}", "--out", str(tmp_path))

    def test_given_bad_names_when_issuing_then_clear_errors(self, tmp_path: Path):
        with pytest.raises(CommandError, match="NAMESPACE/NAME"):
            run("pki", "issue", "justname", "--out", str(tmp_path))
        with pytest.raises(CommandError, match="no Kyma kcp-system/ghost"):
            run("pki", "issue", "kcp-system/ghost", "--out", str(tmp_path))

    def test_given_a_rotation_when_exporting_then_the_bundle_has_both_cas(self, tmp_path: Path):
        run("pki", "bootstrap")
        assert "joined the bundle" in run("pki", "rotate-ca", "--yes")
        assert run("pki", "export-bundle").count("BEGIN CERTIFICATE") == 2
        assert "2 CA certificate(s)" in run("pki", "export-bundle", "--out", str(tmp_path / "b.pem"))
        status = run("pki", "status")
        assert "issuing" in status and "serving" in status

    def test_given_no_ca_when_exporting_then_it_says_how_to_start(self):
        with pytest.raises(CommandError, match="pki bootstrap"):
            run("pki", "export-bundle")


class TestAdminAndApi:
    @pytest.fixture
    def issued(self):
        services.ca_bootstrap()
        services.listener_certificate()
        return services.certificate_for_kyma(kyma=KymaFactory())

    def test_given_certificates_when_staff_browses_then_pages_render_without_keys(self, admin_client, issued):
        for url in (
            reverse("admin:pki_certificate_changelist"),
            reverse("admin:pki_certificate_change", args=[issued.pk]),
            reverse("admin:pki_certificateauthority_changelist"),
            reverse("admin:pki_certificateauthority_change", args=[issued.issuer_id]),
            reverse("admin:pki_certificateauthority_rotate"),
        ):
            page = admin_client.get(url)
            assert page.status_code == 200, url
            assert b"PRIVATE KEY" not in page.content

    def test_given_the_rotate_page_when_confirmed_then_a_new_ca_joins(self, admin_client, issued):
        page = admin_client.get(reverse("admin:pki_certificateauthority_rotate"))
        assert b"Yes, rotate the CA" in page.content
        assert CertificateAuthority.objects.count() == 1
        admin_client.post(reverse("admin:pki_certificateauthority_rotate"))
        assert CertificateAuthority.objects.count() == 2

    def test_given_a_certificate_when_renewed_in_the_admin_then_superseded(self, admin_client, issued):
        admin_client.post(
            reverse("admin:pki_certificate_changelist"), {"action": "renew", "_selected_action": [issued.pk]}
        )
        issued.refresh_from_db()
        assert issued.superseded_at is not None
        assert Certificate.objects.filter(kyma=issued.kyma, superseded_at__isnull=True).exists()

    def test_given_the_status_filter_when_listing_then_only_that_status(self, admin_client, issued):
        services.certificate_issue_for_kyma(kyma=issued.kyma)
        page = admin_client.get(reverse("admin:pki_certificate_changelist") + "?status=superseded")
        assert issued.serial[:16].encode() in page.content

    def test_given_the_api_when_listing_then_read_only_and_keyless(self, api, issued):
        listed = api.get("/api/v1/certificates/?purpose=runtime").json()
        assert listed["count"] == 1
        entry = listed["results"][0]
        assert entry["status"] == "valid" and entry["kyma"] == issued.kyma.name
        assert "private_key" not in entry and "PRIVATE" not in str(listed)
        assert api.post("/api/v1/certificates/", {}, format="json").status_code == 405
        cas = api.get("/api/v1/certificateauthorities/").json()
        assert cas["results"][0]["role"] == "issuing+serving"

    def test_given_a_certificate_close_to_expiry_then_metrics_report_it(self, client, issued):
        Certificate.objects.filter(pk=issued.pk).update(
            not_after=issued.created_at + dt.timedelta(days=3),
            renew_after=issued.created_at - dt.timedelta(days=1),
        )
        text = client.get("/metrics").content.decode()
        assert "controlplane_certificates_expiring_soon 1.0" in text
        assert "controlplane_certificate_renewals_overdue 1.0" in text
        assert 'controlplane_certificates{purpose="runtime",status="renewing"} 1.0' in text
