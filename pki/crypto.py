"""Pure X.509 and key handling on top of ``cryptography``.

No database, no settings, no clock of its own: every function takes what it needs (including
``now``) so the policy code in ``pki.services`` stays testable with a controllable clock and this
module stays reusable by processes that must not import Django (the runtime watcher's tests, the
benchmarks).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import ipaddress
import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal, get_args

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from cryptography.x509.verification import DNSName, PolicyBuilder, Store, VerificationError

KeyType = Literal["ecdsa-p256", "rsa-2048", "rsa-3072", "rsa-4096"]
KEY_TYPES: tuple[str, ...] = get_args(KeyType)
PrivateKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey

# Leave a little room for clocks that run behind ours.
BACKDATE = dt.timedelta(minutes=5)


class CertificateError(ValueError):
    """A certificate or key is malformed or cannot be used for what was asked."""


class CertificateVerificationError(CertificateError):
    """A certificate does not chain to the trusted bundle, has expired or has the wrong usage."""


@dataclass(frozen=True)
class SubjectFields:
    """Optional subject attributes for CA certificates (the CN is always given separately)."""

    organization: str = ""
    organizational_unit: str = ""
    country: str = ""
    locality: str = ""

    def attributes(self) -> list[x509.NameAttribute]:
        pairs = (
            (NameOID.COUNTRY_NAME, self.country),
            (NameOID.LOCALITY_NAME, self.locality),
            (NameOID.ORGANIZATION_NAME, self.organization),
            (NameOID.ORGANIZATIONAL_UNIT_NAME, self.organizational_unit),
        )
        return [x509.NameAttribute(oid, value) for oid, value in pairs if value]


@dataclass(frozen=True)
class KeyPair:
    """A certificate and the private key that belongs to it."""

    certificate: x509.Certificate
    private_key: PrivateKey

    @property
    def certificate_pem(self) -> bytes:
        return certificate_to_pem(self.certificate)

    @property
    def private_key_pem(self) -> bytes:
        return private_key_to_pem(self.private_key)


def generate_private_key(key_type: KeyType) -> PrivateKey:
    """Create a fresh private key of the given type."""
    if key_type == "ecdsa-p256":
        return ec.generate_private_key(ec.SECP256R1())
    if key_type in ("rsa-2048", "rsa-3072", "rsa-4096"):
        return rsa.generate_private_key(public_exponent=65537, key_size=int(key_type[4:]))
    raise CertificateError(f"unsupported key type {key_type!r}; use one of {', '.join(KEY_TYPES)}")


def key_type_of(key: PrivateKey | x509.Certificate) -> str:
    """Name the key type of a private key or of a certificate's public key."""
    public = key.public_key()
    if isinstance(public, ec.EllipticCurvePublicKey):
        if isinstance(public.curve, ec.SECP256R1):
            return "ecdsa-p256"
        return f"ecdsa-{public.curve.name}"
    if isinstance(public, rsa.RSAPublicKey):
        return f"rsa-{public.key_size}"
    return type(public).__name__


def private_key_to_pem(key: PrivateKey) -> bytes:
    """Serialize a private key as unencrypted PKCS#8 PEM (callers encrypt it at rest)."""
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def load_private_key(pem: bytes) -> PrivateKey:
    """Parse a PEM private key; only ECDSA and RSA keys are accepted."""
    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except (ValueError, TypeError) as exc:
        raise CertificateError(f"not a PEM private key: {exc}") from exc
    if not isinstance(key, (ec.EllipticCurvePrivateKey, rsa.RSAPrivateKey)):
        raise CertificateError(f"unsupported private key type {type(key).__name__}")
    return key


def certificate_to_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def load_certificate(pem: bytes) -> x509.Certificate:
    """Parse exactly one PEM certificate."""
    certs = load_certificates(pem)
    if len(certs) != 1:
        raise CertificateError(f"expected one PEM certificate, found {len(certs)}")
    return certs[0]


def load_certificates(pem: bytes) -> list[x509.Certificate]:
    """Parse a PEM bundle (zero or more certificates)."""
    if b"-----BEGIN CERTIFICATE-----" not in pem:
        return []
    try:
        return x509.load_pem_x509_certificates(pem)
    except ValueError as exc:
        raise CertificateError(f"malformed PEM certificate: {exc}") from exc


def bundle_to_pem(certs: Iterable[x509.Certificate]) -> bytes:
    return b"".join(certificate_to_pem(cert) for cert in certs)


def fingerprint_sha256(cert: x509.Certificate) -> str:
    """Colon-separated upper-case SHA-256 fingerprint, the way openssl prints it."""
    digest = cert.fingerprint(hashes.SHA256()).hex().upper()
    return ":".join(digest[i : i + 2] for i in range(0, len(digest), 2))


def serial_hex(cert: x509.Certificate) -> str:
    return format(cert.serial_number, "x")


def dns_names(cert: x509.Certificate) -> list[str]:
    """DNS and IP subject alternative names, as strings, in certificate order."""
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    return [str(name.value) for name in san if isinstance(name, x509.DNSName | x509.IPAddress)]


def common_name(cert: x509.Certificate) -> str:
    attrs = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    value = attrs[0].value if attrs else ""
    return value if isinstance(value, str) else value.decode()


def public_key_matches(cert: x509.Certificate, key: PrivateKey) -> bool:
    spki = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    return cert.public_key().public_bytes(*spki) == key.public_key().public_bytes(*spki)


def _random_serial() -> int:
    # 159 bits: positive, unpredictable, under the 20-octet limit of RFC 5280.
    return secrets.randbits(159) | (1 << 158)


def _signature_hash(key: PrivateKey) -> hashes.HashAlgorithm:
    return hashes.SHA256()


def create_ca(
    *,
    common_name: str,
    now: dt.datetime,
    validity: dt.timedelta,
    key_type: KeyType = "ecdsa-p256",
    subject: SubjectFields | None = None,
    key: PrivateKey | None = None,
) -> KeyPair:
    """Create a self-signed root CA certificate (path length 0: it only signs leaves)."""
    if not common_name:
        raise CertificateError("a CA needs a common name")
    if validity <= dt.timedelta(0):
        raise CertificateError("CA validity must be positive")
    key = key or generate_private_key(key_type)
    name = x509.Name(
        [*(subject or SubjectFields()).attributes(), x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    )
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(_random_serial())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + validity)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(ski, critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski), critical=False)
        .sign(key, _signature_hash(key))
    )
    return KeyPair(cert, key)


def issue_certificate(
    *,
    ca: KeyPair,
    common_name: str,
    dns_names: Sequence[str],
    now: dt.datetime,
    validity: dt.timedelta,
    key_type: KeyType = "ecdsa-p256",
    server: bool = True,
    client: bool = True,
    key: PrivateKey | None = None,
) -> KeyPair:
    """Issue a leaf certificate signed by ``ca``.

    The leaf never outlives its CA (a certificate the verifier would reject anyway), never has
    an empty CN or SAN list, and carries the extended key usages it is meant for, so a server-only
    certificate cannot authenticate a client and the other way round.
    """
    if not common_name:
        raise CertificateError("a certificate needs a non-empty common name")
    if len(common_name) > 64:
        raise CertificateError("the common name is longer than 64 characters (RFC 5280 upper bound)")
    names = [name for name in dict.fromkeys(dns_names) if name]
    if not names:
        raise CertificateError("a certificate needs at least one DNS name")
    if not (server or client):
        raise CertificateError("a certificate must allow server or client authentication")
    if validity <= dt.timedelta(0):
        raise CertificateError("certificate validity must be positive")
    if ca.certificate.not_valid_after_utc <= now:
        raise CertificateError("the issuing CA has expired")
    key = key or generate_private_key(key_type)
    not_after = min(now + validity, ca.certificate.not_valid_after_utc)
    usages = [
        oid
        for oid, wanted in (
            (ExtendedKeyUsageOID.SERVER_AUTH, server),
            (ExtendedKeyUsageOID.CLIENT_AUTH, client),
        )
        if wanted
    ]
    is_rsa = isinstance(key, rsa.RSAPrivateKey)
    ca_ski = ca.certificate.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(ca.certificate.subject)
        .public_key(key.public_key())
        .serial_number(_random_serial())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=is_rsa,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(x509.SubjectAlternativeName([_general_name(name) for name in names]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False)
        .sign(ca.private_key, _signature_hash(ca.private_key))
    )
    return KeyPair(cert, key)


def _general_name(name: str) -> x509.GeneralName:
    """An IP address SAN for literal addresses (so clients may dial an IP), else a DNS SAN."""
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


def verify_client(
    cert: x509.Certificate, trusted: Sequence[x509.Certificate], *, now: dt.datetime
) -> list[str]:
    """Verify ``cert`` as a TLS client certificate against the trusted CAs.

    Returns the certificate's DNS SANs. Raises :class:`CertificateVerificationError` when the
    chain, the validity window or the key usage does not hold.
    """
    if not trusted:
        raise CertificateVerificationError("no trusted CA certificate to verify against")
    verifier = PolicyBuilder().store(Store(list(trusted))).time(now).build_client_verifier()
    try:
        verified = verifier.verify(cert, [])
    except VerificationError as exc:
        raise CertificateVerificationError(str(exc)) from exc
    return [name.value for name in verified.subjects or [] if isinstance(name, x509.DNSName)]


def verify_server(
    cert: x509.Certificate, trusted: Sequence[x509.Certificate], *, hostname: str, now: dt.datetime
) -> None:
    """Verify ``cert`` as a TLS server certificate for ``hostname`` against the trusted CAs."""
    if not trusted:
        raise CertificateVerificationError("no trusted CA certificate to verify against")
    verifier = PolicyBuilder().store(Store(list(trusted))).time(now).build_server_verifier(DNSName(hostname))
    try:
        verifier.verify(cert, [])
    except VerificationError as exc:
        raise CertificateVerificationError(str(exc)) from exc


def content_hash(*parts: bytes) -> str:
    """A short, stable digest used to notice that certificate material changed."""
    digest = hashlib.sha256()
    for part in parts:
        digest.update(len(part).to_bytes(8, "big"))
        digest.update(part)
    return digest.hexdigest()[:16]
