"""The worker role through broker outages and shutdowns.

- The broker goes away (Redis restarted, a network blip): the worker never gives up reconnecting
  (``CELERY_BROKER_CONNECTION_MAX_RETRIES`` unset: Celery's default stops after 100 tries), and
  tries every ``WORKER_RECONNECT_MAX`` seconds at most (Celery's consumer waits 2, 4, 6, ... up to
  30 s between tries, so a worker came back up to half a minute after its broker). What it held
  when the connection went is queued again as soon as it is back (:mod:`controlplane.broker`).
- The database goes away: tasks fail and retry (``reconciler.tasks``); the worker itself keeps running.
- Its start-up heap is frozen out of the cyclic collector, which then runs less often
  (:func:`_freeze_startup_heap`).
- SIGTERM (a rolling update, a drained node): Celery's warm shutdown stops taking messages and
  gives back what it reserved; every running reconcile stops at its next step and hands its Kyma
  back (:func:`fleet.queue.hand_back_all`), so the worker ends within one runtime call rather than
  a whole slow reconcile, well inside the pod's grace period.
"""

from __future__ import annotations

import functools
import gc
from typing import Any

from celery import signals
from celery.worker.consumer import Consumer as CeleryConsumer
from django.conf import settings

from fleet import queue


class Consumer(CeleryConsumer):
    """Celery's consumer, reconnecting to a lost broker every few seconds rather than up to 30."""

    def ensure_connected(self, conn: Any) -> Any:
        step = settings.WORKER_RECONNECT_MAX / 2
        conn.ensure_connection = functools.partial(
            conn.ensure_connection,
            interval_start=step,
            interval_step=step,
            interval_max=settings.WORKER_RECONNECT_MAX,
        )
        return super().ensure_connected(conn)


@signals.worker_shutting_down.connect
def _hand_back_on_shutdown(**_: Any) -> None:
    queue.hand_back_all()


@signals.worker_ready.connect
@signals.worker_process_init.connect
def _freeze_startup_heap(**_: Any) -> None:
    """What the worker loaded to start (Django, the apps, the Kubernetes client: a few hundred
    thousand objects) lives as long as the process: frozen, the cyclic collector stops walking it
    on every older-generation collection, a pause that lands on whichever reconcile runs then
    (``bench/e2e_latency.py``). Once in the main process when the worker is ready (the threads
    pool), and in each pool process it forks (prefork). Then the youngest generation is collected
    every ``GC_YOUNG_THRESHOLD`` allocations instead of Python's 700 (see there)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])


# A reconcile allocates tens of thousands of short-lived objects (the runtime's answers parsed,
# the documents rendered, the model instances), nearly all freed by reference counting; with
# Python's threshold of 700 the collector ran every few hundred of them and walked the young
# objects of every thread of the pool each time: bench/fleet.py, a no-op reconcile's worker CPU
# 4.5 ms instead of 5.7 ms in a pair of runs (1,000 runtimes, 50 ms), the workers' memory the same.
GC_YOUNG_THRESHOLD = 10_000
