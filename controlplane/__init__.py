"""The control plane project: settings, Celery app and the core domain (Kymas, modules, sync)."""

from .celery import app as celery_app

__all__ = ["celery_app"]
