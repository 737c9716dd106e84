"""Django for the documentation build: the project's settings on a throw-away state directory.

The references describe the code, not this machine: the build ignores the environment's database,
broker and debug switch, and writes nothing into the repository's ``.state``.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

_IGNORED = ("DATABASE_URL", "CELERY_BROKER_URL", "RECONCILE_FLAGS_URL", "MODULECONFIG_WATCH_REDIS_URL")


def setup() -> None:
    """Set Django up once per process (idempotent)."""
    import django
    from django.apps import apps

    if apps.ready:
        return
    state = tempfile.mkdtemp(prefix="docs-state-")
    atexit.register(shutil.rmtree, state, ignore_errors=True)
    for name in _IGNORED:
        os.environ.pop(name, None)
    os.environ.update(
        DJANGO_SETTINGS_MODULE="controlplane.settings", CONTROLPLANE_STATE_DIR=state, DJANGO_DEBUG="1"
    )
    django.setup()
