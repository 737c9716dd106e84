"""The Celery application shared by the worker and beat roles.

Tasks are fire-and-forget, take ids, and are acknowledged late so a killed worker loses
nothing; configuration comes from Django settings (``CELERY_*``).
"""

import os

from celery import Celery
from kombu.transport import TRANSPORT_ALIASES

# filesystem:// (the quickstart's broker) uses kombu's transport with atomic message files.
TRANSPORT_ALIASES["filesystem"] = "controlplane.broker:Transport"

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")

app = Celery("controlplane")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
