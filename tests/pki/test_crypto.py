"""pki.crypto: chains verified for real, with cryptography's verifier and ``openssl verify``."""

from __future__ import annotations

import datetime as dt
import subprocess
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from pki import crypto

NOW = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.UTC)
DAY = dt.timedelta(days=1)


@pytest.fixture(scope="module")
def ca() -> crypto.KeyPair:
    return crypto.create_ca(common_name="test CA", now=NOW, validity=90 * DAY)


def leaf(ca: crypto.KeyPair, **overrides) -> crypto.KeyPair:
    fields = {
        "common_name": "rt-1",
        "dns_names": ["rt-1.example.com", "skr-webhook.kyma-system.svc"],
        "now": NOW,
        "validity": 60 * DAY,
    }
    return crypto.issue_certificate(ca=ca, **{**fields, **overrides})


def openssl_verify(tmp_path: Path, bundle: bytes, cert: bytes, *extra: str) -> subprocess.CompletedProcess:
    (tmp_path / "ca.pem").write_bytes(bundle)
    (tmp_path / "leaf.pem").write_bytes(cert)
    return subprocess.run(
        [
            "openssl",
            "verify",
            "-x509_strict",
            *extra,
            "-CAfile",
            str(tmp_path / "ca.pem"),
            str(tmp_path / "leaf.pem"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.mark.parametrize("key_type", crypto.KEY_TYPES)
def test_given_each_key_type_when_issuing_then_both_verifiers_accept_the_chain(tmp_path, key_type):
    authority = crypto.create_ca(common_name="ca", now=NOW, validity=90 * DAY, key_type=key_type)
    pair = leaf(authority, key_type=key_type)
    assert crypto.verify_client(pair.certificate, [authority.certificate], now=NOW + DAY) == [
        "rt-1.example.com",
        "skr-webhook.kyma-system.svc",
    ]
    crypto.verify_server(
        pair.certificate, [authority.certificate], hostname="skr-webhook.kyma-system.svc", now=NOW
    )
    assert crypto.key_type_of(pair.private_key) == key_type
    result = openssl_verify(
        tmp_path, authority.certificate_pem, pair.certificate_pem, "-attime", str(int(NOW.timestamp()) + 60)
    )
    assert result.returncode == 0, result.stderr


def test_given_a_foreign_ca_when_verifying_then_both_verifiers_reject(ca, tmp_path):
    foreign = crypto.create_ca(common_name="foreign", now=NOW, validity=90 * DAY)
    pair = leaf(foreign)
    with pytest.raises(crypto.CertificateVerificationError):
        crypto.verify_client(pair.certificate, [ca.certificate], now=NOW)
    result = openssl_verify(
        tmp_path, ca.certificate_pem, pair.certificate_pem, "-attime", str(int(NOW.timestamp()))
    )
    assert result.returncode != 0


def test_given_an_expired_certificate_when_verifying_then_rejected(ca, tmp_path):
    pair = leaf(ca, validity=DAY)
    later = NOW + 2 * DAY
    with pytest.raises(crypto.CertificateVerificationError):
        crypto.verify_client(pair.certificate, [ca.certificate], now=later)
    result = openssl_verify(
        tmp_path, ca.certificate_pem, pair.certificate_pem, "-attime", str(int(later.timestamp()))
    )
    assert "expired" in result.stdout + result.stderr


def test_given_an_expired_ca_when_issuing_then_refused(ca):
    with pytest.raises(crypto.CertificateError, match="issuing CA has expired"):
        leaf(ca, now=NOW + 91 * DAY)


def test_given_a_long_validity_when_issuing_then_the_leaf_never_outlives_its_ca(ca):
    pair = leaf(ca, validity=365 * DAY)
    assert pair.certificate.not_valid_after_utc == ca.certificate.not_valid_after_utc


def test_given_a_server_only_certificate_when_used_as_client_then_wrong_key_usage_is_rejected(ca, tmp_path):
    server_only = leaf(ca, client=False)
    with pytest.raises(crypto.CertificateVerificationError, match="EKU"):
        crypto.verify_client(server_only.certificate, [ca.certificate], now=NOW)
    result = openssl_verify(
        tmp_path,
        ca.certificate_pem,
        server_only.certificate_pem,
        "-purpose",
        "sslclient",
        "-attime",
        str(int(NOW.timestamp())),
    )
    assert result.returncode != 0


def test_given_a_client_only_certificate_when_used_as_server_then_rejected(ca):
    client_only = leaf(ca, server=False)
    with pytest.raises(crypto.CertificateVerificationError):
        crypto.verify_server(client_only.certificate, [ca.certificate], hostname="rt-1.example.com", now=NOW)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"common_name": ""}, "non-empty common name"),
        ({"dns_names": []}, "at least one DNS name"),
        ({"dns_names": [""]}, "at least one DNS name"),
        ({"common_name": "x" * 65}, "longer than 64"),
        ({"server": False, "client": False}, "server or client"),
    ],
)
def test_given_an_empty_identity_when_issuing_then_refused(ca, overrides, message):
    with pytest.raises(crypto.CertificateError, match=message):
        leaf(ca, **overrides)


def test_given_a_runtime_certificate_then_it_serves_and_authenticates(ca):
    cert = leaf(ca).certificate
    usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert set(usages) == {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}
    assert crypto.common_name(cert) == "rt-1"
    assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca


def test_given_an_ip_address_name_then_it_becomes_an_ip_san(ca):
    cert = leaf(ca, dns_names=["localhost", "127.0.0.1"], client=False).certificate
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in san.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert crypto.dns_names(cert) == ["localhost", "127.0.0.1"]


def test_given_a_bundle_with_two_cas_when_verifying_then_either_chain_is_accepted(ca):
    other = crypto.create_ca(common_name="other", now=NOW, validity=90 * DAY)
    bundle = crypto.load_certificates(crypto.bundle_to_pem([ca.certificate, other.certificate]))
    for authority in (ca, other):
        crypto.verify_client(leaf(authority).certificate, bundle, now=NOW)


def test_given_pem_round_trip_then_keys_and_certificates_match(ca):
    pair = leaf(ca)
    key = crypto.load_private_key(pair.private_key_pem)
    assert crypto.public_key_matches(crypto.load_certificate(pair.certificate_pem), key)
    assert not crypto.public_key_matches(ca.certificate, key)
    with pytest.raises(crypto.CertificateError):
        crypto.load_private_key(b"not a key")
    with pytest.raises(crypto.CertificateError, match="expected one PEM certificate, found 0"):
        crypto.load_certificate(b"nothing here")
