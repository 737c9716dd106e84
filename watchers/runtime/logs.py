"""JSON-lines logging: one object per line so admissions and failures can be grepped and parsed.

Structured fields travel in ``extra={"fields": {...}}`` (see :func:`log_event`); the formatter
merges them into the line. Nothing here ever receives key or certificate material: callers pass
paths and fingerprints only.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import sys
from typing import Any

ROOT_LOGGER = "watchers.runtime"


def log_event(logger: logging.Logger, level: int, message: str, /, **fields: Any) -> None:
    """Log ``message`` with structured ``fields`` (skipped cheaply when the level is disabled)."""
    if logger.isEnabledFor(level):
        logger.log(level, message, extra={"fields": fields})


class JsonFormatter(logging.Formatter):
    """``{"ts": ..., "level": ..., "logger": ..., "msg": ..., <fields>}`` on a single line."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            for key, value in fields.items():
                line.setdefault(key, value)
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str, ensure_ascii=False)


def setup_logging(level: str = "INFO", stream: Any = None) -> None:
    """Send the watcher's loggers to ``stream`` (stderr) as JSON lines; idempotent."""
    root = logging.getLogger(ROOT_LOGGER)
    root.setLevel(level)
    for handler in list(root.handlers):
        if getattr(handler, "_watcher_handler", False):
            root.removeHandler(handler)
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter())
    handler._watcher_handler = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.propagate = False
