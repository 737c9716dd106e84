"""Writes WatchEvent records in batches, off the request path.

Each listener process buffers accepted events and a background thread inserts them every
``FLUSH_INTERVAL`` seconds. Identical events (same Kyma, component, object, kind and outcome)
within one interval become one row with a count: a burst of a thousand events for one object
costs one row. The buffer is bounded: if the database stays away, the oldest groups are dropped
and counted (the events themselves were already enqueued; only the inspection record is lost).

It cannot be poisoned: text no database stores (a NUL, a lone surrogate) is written as U+FFFD,
and a row the database refuses anyway is written alone, logged once with the reason and dropped,
so the rest of its batch, and every later batch, is written. Only a database that is unavailable
(``kernel.dberrors``) puts a batch back to be tried again: the outage is logged once, then one
line per try, the tries further apart each time (up to ``RETRY_MAX`` s; :class:`kernel.outage.Outage`).
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import threading

from django.db import close_old_connections, transaction

from kernel.dberrors import database_unavailable
from kernel.documents.nesting import storable
from kernel.outage import Outage

from .events import WatchEvent
from .metrics import RECORDS_DROPPED
from .models import WatchEventRecord

log = logging.getLogger(__name__)

# Seconds between two writes. Each write costs the process about 70 us of CPU per row (the ORM's
# bulk insert), and under load a row per busy object and outcome: at 0.25 s that was some 3 % of
# the listener's CPU (py-spy, bench/listener.py row (a')); each second it is a quarter of that.
FLUSH_INTERVAL = 1.0
BUFFER_LIMIT = 20_000
# Longest wait between two tries to write while the database is away (seconds).
RETRY_MAX = 5.0

Key = tuple[int, str, str, str, str, str, str, str, str]

# This process's id, kept up to date across forks (gunicorn forks its workers): os.getpid() is a
# system call (0.4 us), and every accepted event asks whether this process started its thread.
_PID = [os.getpid()]
os.register_at_fork(after_in_child=lambda: _PID.__setitem__(0, os.getpid()))


class EventRecorder:
    def __init__(self) -> None:
        self._groups: dict[Key, list] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._pid: int | None = None

    def add(self, kyma_id: int, event: WatchEvent, outcome: str, received_at: dt.datetime) -> None:
        key = (
            kyma_id,
            event.component,
            event.contract,
            event.watched.namespace,
            event.watched.name,
            event.group,
            event.version,
            event.kind,
            outcome,
        )
        with self._lock:
            group = self._groups.get(key)
            if group is not None:
                group[0] += 1
                group[1] = max(group[1], received_at)
            elif len(self._groups) < BUFFER_LIMIT:
                self._groups[key] = [1, received_at]
            else:
                RECORDS_DROPPED.inc()
            if self._pid != _PID[0]:
                self._start()

    def _start(self) -> None:
        self._pid = _PID[0]
        self._thread = threading.Thread(target=self._run, name="event-recorder", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        stop = threading.Event()
        outage = Outage(
            log,
            "event records",
            first=FLUSH_INTERVAL * 2,
            most=RETRY_MAX,
            doing=f"kept in memory (up to {BUFFER_LIMIT:,} groups) until it answers",
        )
        delay = FLUSH_INTERVAL
        while not stop.wait(delay):
            delay = FLUSH_INTERVAL
            try:
                self.flush()
            except Exception as exc:
                close_old_connections()
                if database_unavailable(exc):  # one line per try, the tries further apart
                    delay = outage.failed(exc)
                else:
                    log.exception("writing watch event records failed; will retry")
                continue
            outage.recovered()

    def flush(self) -> int:
        """Insert what is buffered; returns the number of rows written."""
        with self._lock:
            groups, self._groups = self._groups, {}
        if not groups:
            return 0
        rows = {key: _row(key, count, received_at) for key, (count, received_at) in groups.items()}
        try:
            with transaction.atomic():  # a savepoint when the caller is in a transaction already
                WatchEventRecord.objects.bulk_create(list(rows.values()), batch_size=1000)
        except Exception as exc:
            if database_unavailable(exc):
                self._put_back(groups)
                raise
            return self._write_one_by_one(rows, groups)
        return len(rows)

    def _write_one_by_one(self, rows: dict[Key, WatchEventRecord], groups: dict[Key, list]) -> int:
        """A batch the database refused: each row alone, so only the bad one is lost."""
        written = 0
        keys = list(rows)
        for position, key in enumerate(keys):
            try:
                with transaction.atomic():
                    WatchEventRecord.objects.bulk_create([rows[key]])
            except Exception as exc:
                if database_unavailable(exc):
                    self._put_back({k: groups[k] for k in keys[position:]})
                    raise
                count = groups[key][0]
                RECORDS_DROPPED.inc(max(count, 0))
                log.warning(
                    "watch event record dropped, the database refused it (%s: %s): kyma %s, %s %s/%s, "
                    "%d event(s)",
                    type(exc).__name__,
                    str(exc).splitlines()[0][:200] if str(exc) else "",
                    key[0],
                    ascii(key[7])[1:-1],
                    ascii(key[3])[1:-1],
                    ascii(key[4])[1:-1],
                    count,
                )
                continue
            written += 1
        return written

    def _put_back(self, groups: dict[Key, list]) -> None:
        with self._lock:
            for key, value in groups.items():
                if key in self._groups:
                    self._groups[key][0] += value[0]
                elif len(self._groups) < BUFFER_LIMIT:
                    self._groups[key] = value
                else:
                    RECORDS_DROPPED.inc(value[0])


def _row(key: Key, count: int, received_at: dt.datetime) -> WatchEventRecord:
    kyma_id, component, contract, namespace, name, group, version, kind, outcome = key
    return WatchEventRecord(
        kyma_id=kyma_id,
        component=storable(component),
        contract=storable(contract),
        watched_namespace=storable(namespace)[:253],
        watched_name=storable(name)[:253],
        gvk_group=storable(group)[:253],
        gvk_version=storable(version)[:63],
        gvk_kind=storable(kind)[:63],
        outcome=outcome,
        count=count,
        received_at=received_at,
    )


RECORDER = EventRecorder()
