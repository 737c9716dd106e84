"""A process's first publish, made before it takes requests instead of by the first of them.

The first task a process publishes builds the Celery app's task registry and message machinery,
connects a producer to the broker and declares the queue there; every later publish reuses them.
In a listener worker that first publish took 20-40 ms, paid by the first WatchEvent the worker
accepted (bench/e2e_latency.py row (a): the slowest change of a run, and with two workers
often the second slowest too, its p99). :func:`publisher_warm` does all of it but the send.
"""

from __future__ import annotations

import logging

from celery import current_app

from .requests import RECONCILE_TASK

log = logging.getLogger(__name__)


def publisher_warm() -> None:
    """Everything of publishing a reconcile task but sending it: the app's tasks and router, the
    task message, a producer connected to the broker with the task's queue declared. A broker
    that is away now is no error (logged, after one retry): the first publish connects then, as
    before."""
    app = current_app._get_current_object()
    app.tasks  # noqa: B018 - finalizes the app (binds its tasks), as the first send_task would
    app.backend  # noqa: B018 - send_task's result object asks for it: looked up by name once
    amqp = app.amqp
    route = amqp.router.route({}, RECONCILE_TASK, args=(0,), kwargs={})
    amqp.create_task_message("warm-up", RECONCILE_TASK, (0,), {})
    amqp.send_task_message  # noqa: B018 - built on first use (with the app's event dispatcher)
    try:
        with app.producer_or_acquire() as producer:
            producer.connection.ensure_connection(max_retries=1)
            if route.get("queue") is not None:
                producer.maybe_declare(route["queue"], retry=False)
    except Exception as exc:  # a warm-up never keeps a worker from serving (its events answer 503)
        log.warning("could not connect to the broker before serving (%s): the first publish will", exc)
