"""The control plane project: settings, URLs, the Celery app, health, and the role commands.

The domain is the ``fleet`` app; shared building blocks are in ``kernel``."""

from .celery import app as celery_app

__all__ = ["celery_app"]
