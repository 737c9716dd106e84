"""Readiness checks, shared by the web role's ``/readyz`` and the listener's side port.

A check returns ``None`` when its dependency answers, else a reason that names it. The checks run
side by side, each in a daemon thread, and the answer waits at most ``CHECK_TIMEOUT`` seconds:
a database behind a dropped route (no refusal, just silence) must fail the probe in time instead
of hanging it. Each thread closes the database connection it opened, so no connection outlives a
probe (the listener's gunicorn master forks workers, which must not inherit one).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping

from celery import current_app as app
from django.db import connection, connections

log = logging.getLogger(__name__)

Check = Callable[[], "str | None"]

# Within the probes' timeoutSeconds (deploy/kubernetes/base), above the broker's 2 s connect timeout.
CHECK_TIMEOUT = 3.0


def check_database() -> str | None:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception as exc:
        return f"database unreachable: {type(exc).__name__}: {exc}"
    return None


def check_broker() -> str | None:
    try:
        with app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, interval_start=0, interval_step=0, timeout=2)
    except Exception as exc:
        return f"broker unreachable: {type(exc).__name__}: {exc}"
    return None


def run_checks(checks: Mapping[str, Check], *, timeout: float = CHECK_TIMEOUT) -> dict[str, str]:
    """Each check's answer, ``"ok"`` or its reason; a check still running after ``timeout``
    seconds (counted for all checks together) is reported as not answering."""
    answers: dict[str, str] = {}

    def run(name: str, check: Check) -> None:
        try:
            answers[name] = check() or "ok"
        except Exception as exc:
            answers[name] = f"{name} check failed: {type(exc).__name__}: {exc}"
        finally:
            connections.close_all()

    threads = [
        threading.Thread(target=run, args=(name, check), name=f"readyz-{name}", daemon=True)
        for name, check in checks.items()
    ]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + timeout
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    return {name: answers.get(name, f"{name} did not answer within {timeout:g} s") for name in checks}


def readiness(checks: Mapping[str, Check], *, timeout: float = CHECK_TIMEOUT) -> tuple[int, dict]:
    """(HTTP status, body) of a ``/readyz`` answer: 200 when every check passed, else 503."""
    started = time.monotonic()
    answers = run_checks(checks, timeout=timeout)
    failing = [answer for answer in answers.values() if answer != "ok"]
    body = {
        "status": "unavailable" if failing else "ok",
        "checks": answers,
        "seconds": round(time.monotonic() - started, 3),
    }
    if failing:
        log.warning("not ready: %s", "; ".join(failing))
    return (503 if failing else 200), body


# What every role that talks to the database and queues tasks needs.
CORE_CHECKS: dict[str, Check] = {"database": check_database, "broker": check_broker}
