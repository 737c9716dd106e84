"""WSGI entry point of the listener role (served by gunicorn with client certificates)."""

import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
os.environ.setdefault("CONTROLPLANE_ROLE", "listener")
django.setup()

from .app import application  # noqa: E402 - Django must be set up first

__all__ = ["application"]
