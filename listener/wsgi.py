"""WSGI entry point of the listener role (served by gunicorn with client certificates)."""

import gc
import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
os.environ.setdefault("CONTROLPLANE_ROLE", "listener")
django.setup()

from .app import application  # noqa: E402 - Django must be set up first

# What the process loaded to get here (Django, the apps, their modules: some 160,000 objects) lives
# as long as the process: frozen, the cyclic collector no longer walks it on every older-generation
# collection, which cost about 8 us of a WatchEvent's 45 (bench/listener_checks.py).
gc.collect()
gc.freeze()

__all__ = ["application"]
