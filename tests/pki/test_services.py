"""PKI policy with a controllable clock: issuance, renewal, rotation steps in order, storage."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import connection

from pki import crypto, maintenance, selectors, services
from pki.models import Certificate, CertificateAuthority, CertificatePurpose
from tests.factories import KymaFactory

pytestmark = pytest.mark.django_db

T0 = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.UTC)
DAY = dt.timedelta(days=1)


def chain_ok(cert: Certificate, now: dt.datetime) -> list[str]:
    trusted = crypto.load_certificates(selectors.ca_bundle_pem(now))
    return crypto.verify_client(crypto.load_certificate(cert.certificate_pem.encode()), trusted, now=now)


class TestBootstrap:
    def test_given_no_ca_when_bootstrapping_twice_then_one_ca(self):
        first, created = services.ca_bootstrap(now=T0)
        second, created_again = services.ca_bootstrap(now=T0 + DAY)
        assert created and not created_again and first.pk == second.pk
        assert first.not_after == T0 + 90 * DAY
        assert first.key_type == "ecdsa-p256"

    def test_given_rsa_policy_when_bootstrapping_then_the_ca_uses_it(self, settings):
        settings.PKI_CA_KEY_TYPE = "rsa-3072"
        ca, _ = services.ca_bootstrap(now=T0)
        assert ca.key_type == "rsa-3072"

    def test_given_an_operator_ca_when_imported_then_it_issues(self):
        pair = crypto.create_ca(common_name="corp CA", now=T0, validity=365 * DAY)
        ca, created = services.ca_bootstrap(
            now=T0, import_cert_pem=pair.certificate_pem, import_key_pem=pair.private_key_pem
        )
        assert created and ca.imported and ca.common_name == "corp CA"
        cert = services.certificate_for_kyma(kyma=KymaFactory(), now=T0)
        assert cert.issuer_id == ca.pk

    @pytest.mark.parametrize(
        ("make", "message"),
        [
            (lambda p, o: (p.certificate_pem, o.private_key_pem), "does not belong"),
            (
                lambda p, o: (
                    crypto.issue_certificate(
                        ca=p, common_name="x", dns_names=["x"], now=T0, validity=DAY
                    ).certificate_pem,
                    b"",
                ),
                "not a PEM private key",
            ),
            (lambda p, o: (b"junk", p.private_key_pem), "expected one PEM certificate"),
        ],
    )
    def test_given_a_bad_import_when_bootstrapping_then_it_is_refused(self, make, message):
        pair = crypto.create_ca(common_name="a", now=T0, validity=DAY * 10)
        other = crypto.create_ca(common_name="b", now=T0, validity=DAY * 10)
        cert_pem, key_pem = make(pair, other)
        with pytest.raises(services.PKIError, match=message):
            services.ca_bootstrap(now=T0, import_cert_pem=cert_pem, import_key_pem=key_pem)

    def test_given_a_leaf_certificate_when_imported_as_ca_then_it_is_refused(self):
        pair = crypto.create_ca(common_name="a", now=T0, validity=DAY * 10)
        leaf = crypto.issue_certificate(ca=pair, common_name="x", dns_names=["x"], now=T0, validity=DAY)
        with pytest.raises(services.PKIError, match="not a CA"):
            services.ca_bootstrap(
                now=T0, import_cert_pem=leaf.certificate_pem, import_key_pem=leaf.private_key_pem
            )


class TestRuntimeCertificates:
    def test_given_a_kyma_when_issuing_then_cn_and_sans_follow_the_policy(self, settings):
        settings.PKI_EXTRA_DNS_NAMES = ["gateway.example.com"]
        kyma = KymaFactory(runtime_id="rt-7", skr_domain="c-7.kyma.example.com")
        cert = services.certificate_for_kyma(kyma=kyma, now=T0)
        assert cert.common_name == "rt-7"
        assert cert.dns_names == [
            "c-7.kyma.example.com",
            "gateway.example.com",
            "skr-webhook.kyma-system.svc",
            "skr-webhook.kyma-system.svc.cluster.local",
        ]
        assert cert.not_after == T0 + 60 * DAY
        assert cert.renew_after == T0 + 30 * DAY
        assert chain_ok(cert, T0)[0] == "c-7.kyma.example.com"

    def test_given_a_kyma_without_skr_domain_when_issuing_then_a_clear_error(self):
        kyma = KymaFactory(skr_domain="")
        with pytest.raises(services.PKIError, match="has no skr_domain") as failure:
            services.certificate_for_kyma(kyma=kyma, now=T0)
        assert failure.value.errors == [("skr_domain", "required for the runtime watcher certificate")]
        assert not Certificate.objects.exists()

    def test_given_a_current_certificate_when_asked_again_then_the_same_one(self):
        kyma = KymaFactory()
        first = services.certificate_for_kyma(kyma=kyma, now=T0)
        assert services.certificate_for_kyma(kyma=kyma, now=T0 + 29 * DAY).pk == first.pk

    def test_given_the_renewal_window_when_asked_then_renewed_and_the_old_one_superseded(self):
        kyma = KymaFactory()
        first = services.certificate_for_kyma(kyma=kyma, now=T0)
        second = services.certificate_for_kyma(kyma=kyma, now=T0 + 30 * DAY)
        assert second.pk != first.pk
        first.refresh_from_db()
        assert first.superseded_at == T0 + 30 * DAY
        assert first.status(T0 + 30 * DAY) == "superseded"

    def test_given_a_changed_skr_domain_when_asked_then_reissued_with_the_new_san(self):
        kyma = KymaFactory(skr_domain="old.example.com")
        services.certificate_for_kyma(kyma=kyma, now=T0)
        kyma.skr_domain = "new.example.com"
        kyma.save()
        assert services.certificate_for_kyma(kyma=kyma, now=T0 + DAY).dns_names[0] == "new.example.com"

    def test_given_due_certificates_when_renewing_then_only_those_and_kymas_are_reported(self):
        due, fresh = KymaFactory(), KymaFactory()
        services.certificate_for_kyma(kyma=due, now=T0)
        services.certificate_for_kyma(kyma=fresh, now=T0 + 10 * DAY)
        assert services.certificates_renew_due(now=T0 + 31 * DAY) == [due.pk]
        assert services.certificates_renew_due(now=T0 + 31 * DAY) == []

    def test_given_stored_keys_then_the_database_holds_no_pem(self):
        cert = services.certificate_for_kyma(kyma=KymaFactory(), now=T0)
        with connection.cursor() as cursor:
            cursor.execute("SELECT private_key FROM pki_certificate WHERE id = %s", [cert.pk])
            stored_leaf = cursor.fetchone()[0]
            cursor.execute("SELECT private_key FROM pki_certificateauthority")
            stored_ca = cursor.fetchone()[0]
        for stored in (stored_leaf, stored_ca):
            assert "PRIVATE KEY" not in stored and not stored.startswith("MI")
        revealed = Certificate.objects.get(pk=cert.pk).private_key.reveal_bytes()
        assert revealed.startswith(b"-----BEGIN PRIVATE KEY-----")
        assert "PRIVATE" not in repr(Certificate.objects.get(pk=cert.pk).private_key)

    def test_given_many_kymas_when_issuing_in_bulk_then_each_has_one_current_certificate(self):
        kymas = [*KymaFactory.create_batch(25), KymaFactory(skr_domain="")]
        assert services.certificates_issue_bulk(kymas=kymas, now=T0) == 25
        assert services.certificates_issue_bulk(kymas=kymas, now=T0 + DAY) == 25
        current = Certificate.objects.filter(superseded_at__isnull=True)
        assert current.count() == 25 and current.values("kyma").distinct().count() == 25

    def test_given_secret_data_then_it_holds_bundle_leaf_and_key(self):
        cert = services.certificate_for_kyma(kyma=KymaFactory(), now=T0)
        data = services.runtime_secret_data(cert, now=T0)
        assert set(data) == {"ca.crt", "tls.crt", "tls.key"}
        assert crypto.public_key_matches(
            crypto.load_certificate(data["tls.crt"]), crypto.load_private_key(data["tls.key"])
        )


class TestRotation:
    def test_given_a_rotation_when_time_passes_then_each_step_happens_in_order(self, settings):
        settings.PKI_CA_GRACE_DAYS = 4
        kyma = KymaFactory()
        old_ca, _ = services.ca_bootstrap(now=T0)
        old_cert = services.certificate_for_kyma(kyma=kyma, now=T0)
        listener_before = services.listener_certificate(now=T0)
        assert listener_before.issuer_id == old_ca.pk

        # Step 1: the new CA joins the bundle and issues; old runtime certificates become due.
        t1 = T0 + 10 * DAY
        new_ca = services.ca_rotate(now=t1)
        assert [ca.pk for ca in selectors.bundle_authorities(t1)] == [new_ca.pk, old_ca.pk]
        assert selectors.issuing_authority(t1).pk == new_ca.pk
        assert selectors.certificates_due(now=t1) == [kyma.pk]
        # The not-yet-renewed client still verifies against the bundle.
        chain_ok(old_cert, t1)

        # Step 2: during the grace period the listener keeps its old-CA certificate.
        assert selectors.serving_authority(t1 + 3 * DAY).pk == old_ca.pk
        assert services.listener_certificate(now=t1 + 3 * DAY).issuer_id == old_ca.pk

        # Renewal re-issues the runtime certificate from the new CA; the Secret carries both CAs.
        services.certificates_renew_due(now=t1 + DAY)
        renewed = services.certificate_for_kyma(kyma=kyma, now=t1 + DAY)
        assert renewed.issuer_id == new_ca.pk
        bundle = services.runtime_secret_data(renewed, now=t1 + DAY)["ca.crt"]
        assert bundle.count(b"BEGIN CERTIFICATE") == 2

        # Step 3: after the grace period the listener switches to the new CA.
        t3 = t1 + 4 * DAY + dt.timedelta(seconds=1)
        assert selectors.serving_authority(t3).pk == new_ca.pk
        assert services.listener_certificate(now=t3).issuer_id == new_ca.pk

        # Step 4: the old CA leaves the bundle when it expires.
        t4 = old_ca.not_after + dt.timedelta(seconds=1)
        assert [ca.pk for ca in selectors.bundle_authorities(t4)] == [new_ca.pk]

    def test_given_the_rotation_window_when_maintaining_then_rotation_starts_by_itself(self):
        maintenance.pki_maintain(now=T0)
        assert CertificateAuthority.objects.count() == 1
        maintenance.pki_maintain(now=T0 + 50 * DAY)
        assert CertificateAuthority.objects.count() == 1
        report = maintenance.pki_maintain(now=T0 + 57 * DAY)
        assert report.ca_rotated and CertificateAuthority.objects.count() == 2

    def test_given_every_ca_expired_when_maintaining_then_a_new_ca_serves_at_once(self):
        old, _ = services.ca_bootstrap(now=T0)
        later = T0 + 200 * DAY
        report = maintenance.pki_maintain(now=later)
        assert report.ca_created
        assert selectors.serving_authority(later).pk != old.pk
        assert services.listener_certificate(now=later).issuer_id == selectors.issuing_authority(later).pk

    def test_given_expired_superseded_certificates_when_maintaining_then_they_are_pruned(self):
        kyma = KymaFactory()
        first = services.certificate_for_kyma(kyma=kyma, now=T0)
        second = services.certificate_for_kyma(kyma=kyma, now=T0 + 31 * DAY)
        assert Certificate.objects.filter(purpose=CertificatePurpose.RUNTIME).count() == 2
        maintenance.pki_maintain(now=T0 + 61 * DAY)  # the first has expired; the second is due and superseded
        superseded = Certificate.objects.filter(
            purpose=CertificatePurpose.RUNTIME, superseded_at__isnull=False
        )
        assert list(superseded.values_list("pk", flat=True)) == [second.pk]
        assert not Certificate.objects.filter(pk=first.pk).exists()
