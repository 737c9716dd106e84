"""The Celery application shared by the worker and beat roles.

Tasks are fire-and-forget, take ids, and are acknowledged late so a killed worker loses
nothing; configuration comes from Django settings (``CELERY_*``).

Database connections: with the threads pool (``WORKER_POOL``) every pool thread has its own
Django connection. Each task starts by dropping its thread's connection only when it is too old
or broken (``CONN_MAX_AGE``, ``CONN_HEALTH_CHECKS``), instead of Celery's default of reconnecting
around every task (a PostgreSQL backend process per reconcile); a stopping worker closes every
thread's connection, so PostgreSQL sees clean disconnects.
"""

import os
import threading
from typing import Any

from celery import Celery
from celery.signals import task_postrun, task_prerun, worker_shutdown
from django.conf import settings
from django.db import close_old_connections, connection, connections
from kombu.transport import TRANSPORT_ALIASES

from controlplane import probes  # noqa: F401 - the worker's side port starts on worker_init
from kernel.configuration import settings_loaded

# filesystem:// (the quickstart's broker) uses kombu's transport with atomic message files; Redis
# one that gives back what a worker held when the broker went away (controlplane/broker.py).
TRANSPORT_ALIASES["filesystem"] = "controlplane.broker:Transport"
TRANSPORT_ALIASES["redis"] = TRANSPORT_ALIASES["rediss"] = "controlplane.broker:RedisTransport"

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
settings_loaded()  # `celery -A controlplane worker|beat`: a bad production setting in one line

app = Celery("controlplane")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

_thread_connections: set[Any] = set()
_thread_connections_lock = threading.Lock()


@task_prerun.connect
def database_connection_checked(**_: Any) -> None:
    """Before a task: this thread's connection is reused unless expired or broken."""
    close_old_connections()
    with _thread_connections_lock:
        _thread_connections.update(connections.all())


@task_postrun.connect
def database_connection_given_back(**_: Any) -> None:
    """After a task, with a pool (``DATABASE_POOL_MAX_SIZE``): the thread's connection goes back,
    so an idle thread holds none and the pool bounds the process's connections."""
    if settings.DATABASE_POOLED:
        connection.close()


@worker_shutdown.connect
def database_connections_closed(**_: Any) -> None:
    """After the pool stopped: close the connections its threads left open."""
    with _thread_connections_lock:
        found = list(_thread_connections)
        _thread_connections.clear()
    for held in found:
        held.inc_thread_sharing()
        try:
            held.close()
        finally:
            held.dec_thread_sharing()
