"""Telling module managers that a ModuleConfig changed (HMAC-signed, retried by the task).

The body is the ModuleConfig document; ``X-Controlplane-Signature`` is ``sha256=<hex>`` of
``<timestamp>.<body>`` under the module's notification key, and ``X-Controlplane-Timestamp`` the
Unix time, so a manager can verify origin and reject replays. A module without a manager URL or
key gets no notifications (managers can always catch up with ``?since_revision=N``).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time

import requests
from django.conf import settings

from fleet.models import ModuleConfig
from fleet.resources.kinds import ModuleConfigKind


class NotifyFailed(Exception):
    """The manager did not confirm (retried with backoff)."""


def signature(key: bytes, timestamp: str, body: bytes) -> str:
    return "sha256=" + hmac.new(key, timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()


def module_manager_notify(*, config_id: int) -> bool:
    """POST the current ModuleConfig to its manager; False when there is nothing to send."""

    config = ModuleConfig.objects.select_related("kyma", "module").filter(pk=config_id).first()
    if config is None or not config.module.notifies:
        return False
    body = json.dumps(ModuleConfigKind().to_document(config), separators=(",", ":")).encode()
    timestamp = str(int(time.time()))
    headers = {
        "Content-Type": "application/json",
        "X-Controlplane-Timestamp": timestamp,
        "X-Controlplane-Signature": signature(config.module.notify_secret.reveal_bytes(), timestamp, body),
    }
    try:
        response = requests.post(
            config.module.manager_url, data=body, headers=headers, timeout=settings.MODULE_NOTIFY_TIMEOUT
        )
    except requests.RequestException as exc:
        raise NotifyFailed(f"{config.module.manager_url}: {exc}") from exc
    if not 200 <= response.status_code < 300:
        raise NotifyFailed(f"{config.module.manager_url} answered {response.status_code}")
    return True
