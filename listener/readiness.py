"""Readiness of the listener role: the web role's checks plus the TLS material it serves with.

In direct mode ``serve listener`` names the server certificate, its key and the client CA bundle
in ``LISTENER_CERTFILE``, ``LISTENER_KEYFILE`` and ``LISTENER_CA_BUNDLE`` (see
:func:`listener.tls.prepare_listener_tls`); gunicorn loads them for the listening socket. The
check loads them the same way, so a missing, unreadable or mismatched file shows here. In proxy
mode TLS ends at the proxy and there is nothing of ours to check.
"""

from __future__ import annotations

import os
import ssl

from django.conf import settings

from kernel.readiness import CORE_CHECKS, Check

TLS_FILES = ("LISTENER_CERTFILE", "LISTENER_KEYFILE", "LISTENER_CA_BUNDLE")


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
    if settings.LISTENER_MODE == "proxy":
        return dict(CORE_CHECKS)
    return {**CORE_CHECKS, "tls": check_tls_material}
