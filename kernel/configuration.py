"""A process that cannot start because of its configuration says so in one line.

``controlplane/settings.py`` raises ``ImproperlyConfigured`` for a bad or missing production
setting. Raised while Django loads the settings, that would reach the operator as a traceback of
40 to 50 lines whose last line names the problem; the entry points (``manage.py``, the Celery
application) load the settings through :func:`settings_loaded` instead, which turns it into one
line on standard error and exit status 2, what a command-line error looks like.
"""

from __future__ import annotations

import sys

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

EXIT_STATUS = 2


def settings_loaded() -> None:
    """Load the settings now; a configuration error ends the process with one line."""
    try:
        settings.INSTALLED_APPS  # noqa: B018 - touching a setting loads them all
    except ImproperlyConfigured as exc:
        sys.stderr.write(f"configuration error: {exc}\n")
        raise SystemExit(EXIT_STATUS) from None
