"""Reading the real task queue (filesystem folder or Redis) without a worker."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from queue import Empty
from typing import Any

from controlplane.celery import app

QUEUE = "controlplane"


@dataclass(frozen=True)
class QueuedTask:
    name: str
    args: list[Any]
    kwargs: dict[str, Any]
    headers: dict[str, Any] = field(default_factory=dict, compare=False)


def drain_tasks() -> list[QueuedTask]:
    """Take every message waiting in the queue, in order."""
    found = []
    with app.connection_for_read() as conn:
        queue = conn.SimpleQueue(QUEUE)
        try:
            while True:
                try:
                    message = queue.get(block=False)
                except Empty:
                    break
                body = message.body if isinstance(message.body, list) else json.loads(message.body)
                found.append(
                    QueuedTask(message.headers["task"], list(body[0]), dict(body[1]), dict(message.headers))
                )
                message.ack()
        finally:
            queue.close()
    return found


def purge_tasks() -> None:
    with app.connection_for_write() as conn:
        conn.SimpleQueue(QUEUE).clear()


def use_broker(url: str) -> str:
    """Point the Celery app at another broker URL (returns the previous one).

    The connection pools are dropped, not closed: kombu keeps pools per connection in a global
    registry, and the previous broker's pool must stay usable when the test switches back.
    """
    previous = app.conf.broker_url
    app.conf.broker_url = url
    # Celery reads CELERY_BROKER_URL from the environment before its configuration.
    if "CELERY_BROKER_URL" in os.environ:
        os.environ["CELERY_BROKER_URL"] = url
    app._pool = None
    app.amqp._producer_pool = None
    return previous
