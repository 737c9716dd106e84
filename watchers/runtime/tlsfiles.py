"""Certificate, key and CA files: validation, SSL contexts, and reloading when they change.

In Kubernetes the watcher's Secret is mounted as a volume and updated in place (an atomic
symlink swap) when the control plane rotates the certificate or the CA. Upstream reads the files
once for the server and once per request for the client; here both SSL contexts are rebuilt when
the files' (mtime, size, inode) change, checked at most every ``reload_interval`` seconds, so the
server serves new connections with the new certificate and the sender reconnects with the new
client certificate and CA bundle without a restart. A half-written or broken update is logged and
the previous, working contexts stay in use.

Only paths, sizes and SHA-256 fingerprints are ever logged, never PEM or key material.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import re
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from watchers.runtime.config import ConfigError
from watchers.runtime.logs import log_event

logger = logging.getLogger("watchers.runtime.tls")

_CERT_BLOCK = re.compile(rb"-----BEGIN CERTIFICATE-----\s+(.+?)\s+-----END CERTIFICATE-----", re.S)


@dataclass(frozen=True)
class TLSContexts:
    """One consistent generation of server and client contexts built from the same files."""

    generation: int
    server: ssl.SSLContext
    client: ssl.SSLContext
    cert_fingerprint: str
    ca_count: int


def _stat_key(paths: tuple[str, ...]) -> tuple[tuple[int, int, int], ...] | None:
    try:
        return tuple((st.st_mtime_ns, st.st_size, st.st_ino) for st in (os.stat(p) for p in paths))
    except OSError:
        return None


def _read(path: str, variable: str) -> bytes:
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as exc:
        raise ConfigError(variable, f"cannot read {path}: {exc.strerror or exc}") from None
    if not data.strip():
        raise ConfigError(variable, f"{path} is empty")
    return data


def _ssl_reason(exc: ssl.SSLError) -> str:
    return exc.reason or exc.strerror or str(exc)


def build_contexts(ca_path: str, cert_path: str, key_path: str, generation: int = 1) -> TLSContexts:
    """Validate the three files and build both contexts; errors name the variable at fault."""
    ca_pem, cert_pem, key_pem = (
        _read(ca_path, "CA_CERT"),
        _read(cert_path, "TLS_CERT"),
        _read(key_path, "TLS_KEY"),
    )
    blocks = _CERT_BLOCK.findall(cert_pem)
    if not blocks:
        raise ConfigError("TLS_CERT", f"{cert_path} contains no PEM certificate")
    probe = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        probe.load_verify_locations(cadata=cert_pem.decode("ascii", "replace"))
    except (ssl.SSLError, ValueError) as exc:
        raise ConfigError("TLS_CERT", f"{cert_path} is not a valid PEM certificate") from exc
    if b"PRIVATE KEY-----" not in key_pem:
        raise ConfigError("TLS_KEY", f"{key_path} contains no PEM private key")
    if b"ENCRYPTED PRIVATE KEY" in key_pem or b"Proc-Type: 4,ENCRYPTED" in key_pem:
        raise ConfigError("TLS_KEY", f"{key_path} is encrypted; an unencrypted key is required")

    client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        client.load_verify_locations(cadata=ca_pem.decode("ascii", "replace"))
    except (ssl.SSLError, ValueError) as exc:
        raise ConfigError("CA_CERT", f"{ca_path} holds no valid PEM CA certificate") from exc
    ca_count = client.cert_store_stats()["x509"]

    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.minimum_version = ssl.TLSVersion.TLSv1_3
    server.maximum_version = ssl.TLSVersion.TLSv1_3
    server.set_alpn_protocols(["http/1.1"])
    for context in (server, client):
        try:
            context.load_cert_chain(cert_path, key_path)
        except ssl.SSLError as exc:
            reason = _ssl_reason(exc)
            if "MISMATCH" in reason.upper():
                raise ConfigError(
                    "TLS_KEY", f"{key_path} does not match the certificate in TLS_CERT"
                ) from None
            raise ConfigError("TLS_KEY", f"cannot load {key_path} with TLS_CERT: {reason}") from None
        except OSError as exc:
            raise ConfigError("TLS_CERT", f"cannot load {cert_path}: {exc.strerror or exc}") from None
    fingerprint = hashlib.sha256(base64.b64decode(b"".join(blocks[0].split()))).hexdigest()
    return TLSContexts(generation, server, client, fingerprint, ca_count)


class TLSMaterial:
    """The current :class:`TLSContexts`, refreshed lazily when the files change.

    Callers ask for :meth:`current` on every new connection; the stat check is rate-limited so this
    costs nothing on the hot path. Thread-safe: the accept loop and the sender call it concurrently.
    """

    def __init__(
        self,
        ca_path: str,
        cert_path: str,
        key_path: str,
        *,
        reload_interval: float = 5.0,
        on_reload: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.paths = (ca_path, cert_path, key_path)
        self.reload_interval = reload_interval
        self._on_reload = on_reload or (lambda result: None)
        self._clock = clock
        self._lock = threading.Lock()
        self._stat = _stat_key(self.paths)
        self._contexts = build_contexts(*self.paths)
        self._next_check = clock() + reload_interval
        self._failed_stat: object = None
        log_event(
            logger,
            logging.INFO,
            "tls material loaded",
            ca_cert=ca_path,
            tls_cert=cert_path,
            cert_sha256=self._contexts.cert_fingerprint,
            ca_certificates=self._contexts.ca_count,
        )

    @property
    def generation(self) -> int:
        return self._contexts.generation

    def current(self) -> TLSContexts:
        """The contexts to use for a new connection, reloading first if the files changed."""
        if self._clock() >= self._next_check:
            self.check()
        return self._contexts

    def check(self) -> bool:
        """Reload now if the files changed; returns True when a new generation was built."""
        with self._lock:
            self._next_check = self._clock() + self.reload_interval
            stat = _stat_key(self.paths)
            if stat is None or stat == self._stat:
                return False
            try:
                contexts = build_contexts(*self.paths, generation=self._contexts.generation + 1)
            except Exception as exc:  # ConfigError, or anything odd in a half-written file
                if stat != self._failed_stat:  # one line per broken version, not one per check
                    self._failed_stat = stat
                    self._on_reload("error")
                    log_event(
                        logger, logging.ERROR, "tls material reload failed; keeping previous", error=str(exc)
                    )
                return False
            self._stat, self._contexts, self._failed_stat = stat, contexts, None
        self._on_reload("success")
        log_event(
            logger,
            logging.INFO,
            "tls material reloaded",
            generation=contexts.generation,
            cert_sha256=contexts.cert_fingerprint,
            ca_certificates=contexts.ca_count,
        )
        return True
