"""TLS material of the listener role, kept current without a restart.

``serve listener`` writes the first server certificate, its key and the CA bundle for gunicorn.
Then each worker process refreshes them from the database every ``LISTENER_TLS_REFRESH`` seconds
and, when they changed (renewal, CA rotation), builds a new ``SSLContext`` that gunicorn uses for
new connections (through its ``ssl_context`` hook). ``ssl`` loads keys only from files, so a
worker writes its certificate and key (mode 0600) into a private directory of its own and removes
it as soon as the context has loaded them: no copy of the key outlives the moment of loading,
whether the worker stops cleanly, is killed or crashes.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import ssl
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

from django.conf import settings
from django.db import close_old_connections

from kernel.dberrors import database_unavailable
from kernel.outage import Outage
from pki import services

log = logging.getLogger(__name__)


def _write_private(path: Path, data: bytes) -> None:
    """Replace ``path`` at once with ``data`` (mode 0600). The temporary file is this writer's own,
    so two writers on one directory (two ``serve listener`` on one state directory) never move
    each other's half-written file or find theirs gone."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_material(directory: Path) -> dict[str, str]:
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    cert, key, bundle = services.listener_material()
    paths = {
        "LISTENER_CERTFILE": directory / "tls.crt",
        "LISTENER_KEYFILE": directory / "tls.key",
        "LISTENER_CA_BUNDLE": directory / "ca.crt",
    }
    for (_, path), data in zip(paths.items(), (cert, key, bundle), strict=True):
        _write_private(path, data)
    return {name: str(path) for name, path in paths.items()}


def prepare_listener_tls() -> dict[str, str]:
    """Environment for the listener's gunicorn config (nothing in proxy mode: TLS ends at the proxy)."""
    if settings.LISTENER_MODE == "proxy":
        return {"LISTENER_MODE": "proxy"}
    return {"LISTENER_MODE": "direct", **write_material(settings.STATE_DIR / "listener-tls")}


def build_context(cert: bytes, key: bytes, bundle: bytes) -> ssl.SSLContext:
    """A server context holding ``cert`` and ``key``; the files it is loaded from exist only
    while it loads them."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    with tempfile.TemporaryDirectory(prefix="listener-tls-") as name:  # mode 0700
        directory = Path(name)
        _write_private(directory / "tls.crt", cert)
        _write_private(directory / "tls.key", key)
        context.load_cert_chain(directory / "tls.crt", directory / "tls.key")
    context.load_verify_locations(cadata=bundle.decode())
    context.verify_mode = ssl.CERT_REQUIRED
    return context


class ListenerTLS:
    """The worker process's current server context."""

    def __init__(self) -> None:
        self._context: ssl.SSLContext | None = None
        self._version = ""
        self._lock = threading.Lock()

    def refresh(self) -> bool:
        cert, key, bundle = services.listener_material()
        version = hashlib.sha256(cert + bundle).hexdigest()
        if version == self._version:
            return False
        context = build_context(cert, key, bundle)
        with self._lock:
            changed = bool(self._version)
            self._context, self._version = context, version
        if changed:
            log.info("listener TLS material changed: new connections use the new certificate and bundle")
        return True

    def context(self, default: Callable[[], ssl.SSLContext]) -> ssl.SSLContext:
        with self._lock:
            context = self._context
        return context or default()

    def start(self, interval: float) -> None:
        def loop() -> None:
            stop = threading.Event()
            outage = Outage(
                log, "listener TLS refresh", first=interval, most=interval, doing="keeping the current one"
            )
            while not stop.wait(interval):
                try:
                    self.refresh()
                    outage.recovered()
                except Exception as exc:
                    if database_unavailable(exc):
                        outage.failed(exc)
                    else:
                        log.exception("refreshing the listener TLS material failed; keeping the current one")
                finally:
                    close_old_connections()

        threading.Thread(target=loop, name="listener-tls-refresh", daemon=True).start()


TLS = ListenerTLS()
