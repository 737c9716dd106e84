"""Checking the control plane's webhook notifications (HMAC-SHA256 of ``<timestamp>.<body>``)."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Mapping

from .manager import ModuleConfig


class InvalidNotification(Exception):
    """A notification whose signature or timestamp does not hold: ignore it (answer 401)."""


def verify_notification(
    key: bytes,
    body: bytes,
    timestamp: str,
    signature: str,
    *,
    tolerance: float = 300,
    now: float | None = None,
) -> bool:
    """True when ``signature`` (``X-Controlplane-Signature``) signs ``body`` at ``timestamp``
    (``X-Controlplane-Timestamp``) under ``key`` and the timestamp is recent (replays fail)."""
    if not timestamp.isdigit():
        return False
    expected = "sha256=" + hmac.new(key, timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    fresh = abs((time.time() if now is None else now) - int(timestamp)) < tolerance
    return hmac.compare_digest(expected, signature) and fresh


def notification_config(key: bytes, body: bytes, headers: Mapping[str, str]) -> ModuleConfig:
    """The ModuleConfig a verified notification carries; ``InvalidNotification`` otherwise."""
    lower = {name.lower(): value for name, value in headers.items()}
    timestamp = lower.get("x-controlplane-timestamp", "")
    signature = lower.get("x-controlplane-signature", "")
    if not verify_notification(key, body, timestamp, signature):
        raise InvalidNotification("bad or stale signature")
    return ModuleConfig.from_document(json.loads(body))
