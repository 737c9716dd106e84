"""Who is calling: the runtime's identity from its client certificate.

*Direct mode*: gunicorn's TLS layer already verified the peer's chain against the CA bundle
(client certificates required); the certificate is read from the connection's socket and checked
again like in proxy mode. OpenSSL's chain check alone accepts the CA's own certificate, or any
CA:TRUE certificate the CA issued, as a client: neither is a runtime's identity.

*Proxy mode* (behind Istio/Envoy): the certificate comes from the first element of the
``X-Forwarded-Client-Cert`` header (its ``Cert=`` field: PEM encoded as a URL query value). The
header is honoured only from ``LISTENER_TRUSTED_PROXIES`` and the certificate is verified against
the bundle again (chain, validity, client-auth key usage), because the proxy is not the last line
of defence.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import ipaddress
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote_plus

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding
from django.conf import settings
from django.db import DatabaseError

from kernel.dberrors import database_unavailable
from kernel.outage import Outage
from pki import crypto
from pki.selectors import ca_bundle_pem

from .conf import HOT

XFCC_LIMIT = 32 * 1024

log = logging.getLogger(__name__)


class IdentityError(Exception):
    """No usable client certificate (401); ``reason`` labels the failed-verification metric."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason


@dataclass(frozen=True)
class ClientIdentity:
    common_name: str
    dns_names: tuple[str, ...]
    fingerprint: str
    certificate_pem: str

    def has_san(self, name: str) -> bool:
        return bool(name) and name.lower() in self._sans

    @functools.cached_property
    def _sans(self) -> frozenset[str]:
        """The SANs in lower case, made once per identity (an identity serves a connection's
        every event)."""
        return frozenset(n.lower() for n in self.dns_names)


def _identity(cert: x509.Certificate) -> ClientIdentity:
    name = crypto.common_name(cert)
    if not name:
        raise IdentityError("client certificate common name is empty", "empty-cn")
    return ClientIdentity(
        common_name=name,
        dns_names=tuple(crypto.dns_names(cert)),
        fingerprint=crypto.fingerprint_sha256(cert),
        certificate_pem=cert.public_bytes(Encoding.PEM).decode(),
    )


def _trusted(cert: x509.Certificate) -> ClientIdentity:
    """The identity of ``cert`` once it verifies as a client certificate of the bundle: chain,
    validity, an end-entity certificate (not a CA) for client authentication."""
    try:
        crypto.verify_client(cert, _TRUST.authorities(), now=dt.datetime.now(dt.UTC))
    except crypto.CertificateVerificationError as exc:
        raise IdentityError(f"client certificate not trusted: {exc}", "untrusted") from exc
    return _identity(cert)


def _bundle_key() -> tuple[str, ...]:
    return tuple(crypto.fingerprint_sha256(ca) for ca in _TRUST.authorities())


@functools.lru_cache(maxsize=4096)
def _verified_der(der: bytes, bundle_key: tuple[str, ...], minute: int) -> ClientIdentity:
    try:
        cert = x509.load_der_x509_certificate(der)
    except ValueError as exc:
        raise IdentityError(f"unreadable client certificate: {exc}", "unreadable") from exc
    return _trusted(cert)


def identity_from_der(der: bytes) -> ClientIdentity:
    """Identity of a certificate the TLS layer accepted, verified again as proxy mode verifies
    (cached per bundle and minute: a watcher reuses its certificate)."""
    return _verified_der(der, _bundle_key(), int(time.time() // 60))


def direct_identity(environ: dict[str, Any]) -> ClientIdentity:
    """The verified peer's identity, kept on the connection: a watcher sends many events over one
    keep-alive connection, and its certificate cannot change within it (TLS 1.3 has no
    renegotiation), so only the first request reads and parses it."""
    sock = environ.get("gunicorn.socket")
    known = getattr(sock, "controlplane_identity", None)
    if known is not None:
        return known
    getpeercert = getattr(sock, "getpeercert", None)
    der = getpeercert(binary_form=True) if getpeercert else None
    if not der:
        raise IdentityError("no client certificate: connect with mutual TLS", "missing")
    identity = identity_from_der(der)
    with contextlib.suppress(AttributeError):  # a socket type without attributes: no cache
        sock.controlplane_identity = identity
    return identity


# --- proxy mode ---------------------------------------------------------------------------------


def _split_outside_quotes(value: str, separator: str) -> list[str]:
    parts, current, quoted, escaped = [], [], False, False
    for char in value:
        if escaped:
            current.append(char)
            escaped = False
        elif char == "\\" and quoted:
            current.append(char)
            escaped = True
        elif char == '"':
            quoted = not quoted
            current.append(char)
        elif char == separator and not quoted:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return parts


def xfcc_certificate_pem(header: str) -> str:
    """The PEM in the ``Cert=`` field of the header's first element (Envoy's XFCC format)."""
    if len(header) > XFCC_LIMIT:
        raise IdentityError("X-Forwarded-Client-Cert header value too long (over 32 KiB)", "header-too-long")
    first = _split_outside_quotes(header, ",")[0]
    for pair in _split_outside_quotes(first, ";"):
        key, sep, value = pair.strip().partition("=")
        if sep and key.strip().lower() == "cert":
            value = value.strip()
            if len(value) >= 2 and value[0] == value[-1] == '"':
                value = value[1:-1].replace('\\"', '"')
            # A URL query value, as upstream reads it: "+" is a space, %XX a byte. Envoy writes
            # %20 and %2B, so its headers read the same either way.
            pem = unquote_plus(value)
            if pem:
                return pem
    raise IdentityError("X-Forwarded-Client-Cert has no Cert= field in its first element", "missing")


@functools.lru_cache(maxsize=64)
def _networks(entries: tuple[str, ...]) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    return tuple(ipaddress.ip_network(entry, strict=False) for entry in entries)


def trusted_proxy(address: str) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in network for network in _networks(tuple(settings.LISTENER_TRUSTED_PROXIES)))


class TrustStore:
    """The CA bundle from the database, refreshed every few seconds (a rotation reaches it fast).

    While the database is away the bundle last read stays in use (new connections of known
    runtimes are still verified, their events still queued), and it is read again with a growing
    delay, one log line per try (:class:`kernel.outage.Outage`)."""

    def __init__(self, ttl: float) -> None:
        self.ttl = ttl
        self._lock = threading.Lock()
        self._loaded_at = float("-inf")
        self._wait = ttl
        self._authorities: list[x509.Certificate] = []
        self._outage = Outage(
            log, "listener CA bundle", first=ttl, most=60.0, doing="using the bundle read last"
        )

    def authorities(self) -> list[x509.Certificate]:
        with self._lock:
            if time.monotonic() - self._loaded_at > self._wait:
                try:
                    self._authorities = crypto.load_certificates(ca_bundle_pem())
                except DatabaseError as exc:
                    if not (self._authorities and database_unavailable(exc)):
                        raise
                    self._wait = self._outage.failed(exc)
                else:
                    self._wait = self.ttl
                    self._outage.recovered()
                self._loaded_at = time.monotonic()
            return self._authorities


_TRUST = TrustStore(ttl=5.0)


@functools.lru_cache(maxsize=4096)
def _verified(pem: str, bundle_key: tuple[str, ...], minute: int) -> ClientIdentity:
    try:
        cert = crypto.load_certificate(pem.encode())
    except crypto.CertificateError as exc:
        raise IdentityError(
            f"X-Forwarded-Client-Cert holds no valid PEM certificate: {exc}", "unreadable"
        ) from exc
    return _trusted(cert)


def proxy_identity(environ: dict[str, Any]) -> ClientIdentity:
    header = environ.get("HTTP_X_FORWARDED_CLIENT_CERT")
    if not header:
        raise IdentityError("request does not contain 'X-Forwarded-Client-Cert' header", "missing")
    peer = environ.get("REMOTE_ADDR", "")
    if not trusted_proxy(peer):
        raise IdentityError(
            f"X-Forwarded-Client-Cert from {peer}, which is not a trusted proxy", "untrusted-proxy"
        )
    pem = xfcc_certificate_pem(header)
    # Cache per bundle and per minute: a changed bundle or the passing of time re-verifies.
    return _verified(pem, _bundle_key(), int(time.time() // 60))


def client_identity(environ: dict[str, Any]) -> ClientIdentity:
    if HOT.LISTENER_MODE == "proxy":
        return proxy_identity(environ)
    return direct_identity(environ)
