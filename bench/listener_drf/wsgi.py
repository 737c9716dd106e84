"""WSGI entry point of the DRF listener variant (served by the listener's gunicorn config)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ["DJANGO_SETTINGS_MODULE"] = "bench.listener_drf.settings"
os.environ.setdefault("CONTROLPLANE_ROLE", "listener")
application = get_wsgi_application()
