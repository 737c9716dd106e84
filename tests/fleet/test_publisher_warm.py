"""A process's first publish, made before it takes requests (fleet.queue.warm)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from django.conf import settings

from tests.support.processes import ROOT, free_port, process_env

# Run in a fresh interpreter: the test process's Celery app has published long before.
PROBE = """
import django
django.setup()
from celery import current_app as app
from fleet import queue
if {warm}:
    queue.publisher_warm()
route = app.amqp.router.route({{}}, queue.RECONCILE_TASK, args=(0,), kwargs={{}})
with app.producer_or_acquire() as producer:
    declared = hash(route["queue"]) in producer.connection.declared_entities
    print("connected" if producer.connection.connected else "not-connected")
    print("declared" if declared else "not-declared")
print("sender-built" if "send_task_message" in vars(app.amqp) else "sender-not-built")
# Shared by the process's threads (CELERY_RESULT_BACKEND_THREAD_SAFE), not looked up by each.
print("backend-shared" if app._backend_cache is not None else "backend-not-shared")
"""


def probe(*, warm: bool, broker: str = "") -> str:
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(warm=warm)],
        cwd=ROOT,
        env=process_env(CELERY_BROKER_URL=broker or settings.CELERY_BROKER_URL),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@pytest.mark.django_db
def test_given_a_fresh_process_when_warmed_then_its_first_publish_finds_everything_made():
    assert probe(warm=True).split() == ["connected", "declared", "sender-built", "backend-shared"]


@pytest.mark.django_db
def test_given_a_fresh_process_not_warmed_then_its_first_publish_would_make_it_all():
    assert probe(warm=False).split() == [
        "not-connected",
        "not-declared",
        "sender-not-built",
        "backend-not-shared",
    ]


@pytest.mark.django_db
def test_given_no_broker_when_warmed_then_the_worker_goes_on_to_serve():
    broker = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    assert probe(warm=True, broker=broker).split()[0] == "not-connected"
