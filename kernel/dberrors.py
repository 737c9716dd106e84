"""Which database errors mean "the database cannot take this request now" (answer 503, the client
retries) and which are bugs (answer 500, and look at the log)."""

from __future__ import annotations

import sqlite3

import psycopg
from django.db import InterfaceError, OperationalError

# PostgreSQL SQLSTATEs (or classes) of a database that is unreachable, out of resources, shutting
# down, or that gave up on the request: connection exceptions (08), insufficient resources (53,
# e.g. too many connections), operator intervention (57P), serialization failure, deadlock, lock
# not available, statement timeout.
_PG_UNAVAILABLE = ("08", "53", "57P", "40001", "40P01", "55P03", "57014")
# SQLite's OperationalError covers both "busy" and "no such column": only these are the former.
_SQLITE_UNAVAILABLE = ("database is locked", "table is locked", "unable to open database", "disk i/o error")


def database_unavailable(exc: BaseException) -> bool:
    """Whether ``exc`` says the database cannot take the request now, rather than that the
    request (or the code) is wrong: a lost connection, too many connections, a lock or a timeout."""
    if isinstance(exc, InterfaceError):
        return True  # the connection was closed under us
    if not isinstance(exc, OperationalError):
        return False
    cause = exc.__cause__
    state = getattr(cause, "sqlstate", None)
    if state:
        return state.startswith(_PG_UNAVAILABLE)
    message = str(exc).lower()
    sqlite_busy = any(m in message for m in _SQLITE_UNAVAILABLE)
    if sqlite_busy or isinstance(cause, sqlite3.Error):
        return sqlite_busy
    # No SQLSTATE: psycopg could not connect at all (no session yet), or nothing says more.
    return cause is None or isinstance(cause, psycopg.OperationalError)
