"""The settings the listener reads on every request, as plain attributes.

Each ``django.conf.settings.NAME`` costs a trip through the lazy settings object's
``__getattribute__`` (about 0.3 us); a WatchEvent read five of them. Here they are read once, and
again whenever a setting changes (Django's ``setting_changed`` signal: tests that override one).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.signals import setting_changed

NAMES = ("LISTENER_MODE", "LISTENER_SAN_PINNING", "LISTENER_RECONCILE_COMPONENT", "DATABASE_POOLED")


class HotSettings:
    __slots__ = ("DATABASE_POOLED", "LISTENER_MODE", "LISTENER_RECONCILE_COMPONENT", "LISTENER_SAN_PINNING")

    def __init__(self) -> None:
        self.load()

    def load(self) -> None:
        for name in NAMES:
            setattr(self, name, getattr(settings, name))


HOT = HotSettings()


def _changed(*, setting: str, **_: Any) -> None:
    if setting in NAMES:
        HOT.load()


setting_changed.connect(_changed, dispatch_uid="listener.conf")
