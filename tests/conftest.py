"""Fixtures shared by the whole suite."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Callable

import pytest
from django.conf import settings
from django.db import DatabaseError
from django.db.backends.signals import connection_created
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from tests.support.broker import QueuedTask, drain_tasks, purge_tasks, use_broker


def _patient_deadlock_checks(sender, connection, **kwargs) -> None:
    """Processes the tests start (listeners, workers) may still be writing when a transactional
    test's teardown truncates the tables. PostgreSQL resolves such a deadlock by aborting the
    session that checks first; the suite's own sessions check later, so the victim is the
    background write (the listener's event recorder and the workers retry), not the teardown."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor, contextlib.suppress(DatabaseError):
            cursor.execute("SET deadlock_timeout = '10s'")  # superuser only: else as before


connection_created.connect(_patient_deadlock_checks)


@pytest.fixture(scope="session", autouse=True)
def _clean_broker() -> None:
    """Start the session with an empty queue (filesystem folder or Redis database)."""
    broker_dir = settings.STATE_DIR / "broker" / "queue"
    if broker_dir.exists():
        shutil.rmtree(broker_dir)
        broker_dir.mkdir(parents=True)
    purge_tasks()


@pytest.fixture(autouse=True)
def _clean_reconcile_marks() -> None:
    """Reconcile marks kept in Redis outlive a test's database; each test starts without any."""
    from fleet.queue.marks import RedisFlags, flags

    store = flags()
    if isinstance(store, RedisFlags):
        keys = list(store.client.scan_iter(match=store.key("*"), count=1000))
        keys += list(store.client.scan_iter(match=store.spaced_key("*"), count=1000))
        keys += list(store.client.scan_iter(match=store.urgent_key("*"), count=1000))
        if keys:
            store.client.delete(*keys)


@pytest.fixture(autouse=True)
def _fresh_runtime_watcher_settings() -> None:
    """Each test's database starts without recorded runtime-watcher settings: the process must
    not remember having recorded its own (watchers.runtime_config)."""
    from watchers import runtime_config

    runtime_config.forget()


@pytest.fixture
def task_queue() -> Callable[[], list[QueuedTask]]:
    """An empty task queue for this test; call the fixture's value to take what was queued."""
    purge_tasks()
    return drain_tasks


@pytest.fixture
def admin_user(django_user_model):
    return django_user_model.objects.create_superuser("root", "root@example.com", "root-password-123")


@pytest.fixture
def api(admin_user) -> APIClient:
    """An API client authenticated with the administrator's token."""
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=admin_user).key}")
    return client


@pytest.fixture
def user_with(django_user_model) -> Callable[..., APIClient]:
    """``user_with("controlplane.view_kyma")``: an API client of a user with just these permissions."""
    from django.contrib.auth.models import Permission

    def make(*perms: str) -> APIClient:
        user = django_user_model.objects.create_user(
            f"user{django_user_model.objects.count()}", password="x-123456789"
        )
        for perm in perms:
            app_label, codename = perm.split(".")
            user.user_permissions.add(
                Permission.objects.get(content_type__app_label=app_label, codename=codename)
            )
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")
        return client

    return make


@pytest.fixture
def broker_down():
    """Point the Celery app at a port where nothing listens, then restore it."""
    previous = use_broker("redis://127.0.0.1:9/0")
    yield
    use_broker(previous)
