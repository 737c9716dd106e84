"""Readiness of the listener role: the web role's checks, a worker that serves, and the TLS
material it serves with.

The side port is the gunicorn master's, which listens (and has the kernel queue connections)
long before a worker has loaded the app: on a busy node tens of seconds. A Service that sent
events to such a pod would have them wait in the backlog or time out, so the listener is ready
only once a worker has loaded the app: each worker leaves a marker file beside the metrics files
(``PROMETHEUS_MULTIPROC_DIR``) when it has, and it goes when the worker exits
(``deploy/gunicorn/listener.py``).

In direct mode ``serve listener`` names the server certificate, its key and the client CA bundle
in ``LISTENER_CERTFILE``, ``LISTENER_KEYFILE`` and ``LISTENER_CA_BUNDLE`` (see
:func:`listener.tls.prepare_listener_tls`); gunicorn loads them for the listening socket. The
check loads them the same way, so a missing, unreadable or mismatched file shows here. In proxy
mode TLS ends at the proxy and there is nothing of ours to check.
"""

from __future__ import annotations

import contextlib
import os
import ssl
from pathlib import Path

from django.conf import settings

from kernel.readiness import CORE_CHECKS, Check

TLS_FILES = ("LISTENER_CERTFILE", "LISTENER_KEYFILE", "LISTENER_CA_BUNDLE")
SERVING_MARKER = "serving-"


def _markers() -> Path | None:
    directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    return Path(directory) if directory else None


def workers_reset() -> None:
    """The master starts: markers an earlier master's workers left say nothing of this one's."""
    if (directory := _markers()) is not None:
        for marker in directory.glob(f"{SERVING_MARKER}*"):
            marker.unlink(missing_ok=True)


def worker_serving(pid: int) -> None:
    """A worker has loaded the app and takes connections."""
    if (directory := _markers()) is not None:
        (directory / f"{SERVING_MARKER}{pid}").touch()


def worker_gone(pid: int) -> None:
    """A worker exited (the master's ``child_exit``)."""
    if (directory := _markers()) is not None:
        (directory / f"{SERVING_MARKER}{pid}").unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def check_workers() -> str | None:
    """A worker of this master has loaded the app (a SIGKILLed worker leaves its marker: its
    process is checked too)."""
    directory = _markers()
    if directory is None:
        return None  # no side port without it: nothing asks
    for marker in directory.glob(f"{SERVING_MARKER}*"):
        with contextlib.suppress(ValueError):
            if _alive(int(marker.name.removeprefix(SERVING_MARKER))):
                return None
    return "no listener worker serves yet (loading the app)"


def check_tls_material() -> str | None:
    paths = {name: os.environ.get(name, "") for name in TLS_FILES}
    unset = [name for name, path in paths.items() if not path]
    if unset:
        return f"TLS material unusable: {', '.join(unset)} not set"
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(paths["LISTENER_CERTFILE"], paths["LISTENER_KEYFILE"])
    except (OSError, ssl.SSLError) as exc:
        return (
            "TLS material unusable: LISTENER_CERTFILE/LISTENER_KEYFILE "
            f"({paths['LISTENER_CERTFILE']}, {paths['LISTENER_KEYFILE']}): {exc}"
        )
    try:
        context.load_verify_locations(cafile=paths["LISTENER_CA_BUNDLE"])
    except (OSError, ssl.SSLError) as exc:
        return f"TLS material unusable: LISTENER_CA_BUNDLE ({paths['LISTENER_CA_BUNDLE']}): {exc}"
    return None


def listener_checks() -> dict[str, Check]:
    checks = {**CORE_CHECKS, "workers": check_workers}
    if settings.LISTENER_MODE == "proxy":
        return checks
    return {**checks, "tls": check_tls_material}
