"""Log formats and filters shared by every role (``LOGGING`` in the settings uses them).

``LOG_FORMAT=json`` gives one JSON object per line for log collectors. The formatter is ours, not
``python-json-logger``: it needs only the standard library and these few lines, and one field
set (time, level, logger, message, exception) is all production asks of it.
"""

from __future__ import annotations

import datetime as dt
import json
import logging

from kernel.dberrors import database_unavailable
from kernel.outage import describe

# celery.beat logs every schedule entry it sends at INFO: with a sweep every few seconds that is
# most of the log. These messages count as DEBUG; what a sweep queued is logged by the sweep.
BEAT_SEND_PREFIX = "Scheduler: Sending due task"


class JsonFormatter(logging.Formatter):
    """One JSON object per record: ``time`` (UTC, ISO 8601), ``level``, ``logger``, ``message``
    and, when an exception is attached, ``exc_info`` (its formatted traceback)."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": dt.datetime.fromtimestamp(record.created, tz=dt.UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exc_info"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["exc_info"] = record.exc_text
        return json.dumps(entry, default=str)


class BeatSendsAtDebug(logging.Filter):
    """Demote beat's "Sending due task" lines to DEBUG: shown only when the root logs DEBUG."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name == "celery.beat" and str(record.msg).startswith(BEAT_SEND_PREFIX):
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            return logging.getLogger().isEnabledFor(logging.DEBUG)
        return True


class DatabaseUnavailableOneLine(logging.Filter):
    """A record that carries a "database unavailable" error (``kernel.dberrors``) is one line: its
    message and the error's class and first line, without the traceback.

    While the database is away every attempt of every loop and task fails the same way (a worker
    logged each task that met the outage with its whole traceback); the traceback says nothing the
    one line does not. Errors that are bugs (a wrong query, anything else) keep their traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if exc is not None and database_unavailable(exc):
            message = record.getMessage()
            record.msg, record.args = f"{message} [database unavailable: {describe(exc)}]", None
            record.exc_info, record.exc_text = None, None
        return True
