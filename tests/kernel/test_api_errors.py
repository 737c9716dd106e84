"""API errors that are not the client's: a database that cannot take the request is a 503 with
Retry-After (the SDK and other clients retry), never a 500."""

from __future__ import annotations

import json
import sqlite3

import psycopg
import pytest
from django.db import DatabaseError, InterfaceError, OperationalError, connection
from rest_framework.test import APIRequestFactory

from kernel.api.errors import DATABASE_RETRY_AFTER, exception_handler
from kernel.dberrors import database_unavailable


@pytest.mark.parametrize(
    "error",
    [
        OperationalError("connection failed: FATAL:  sorry, too many clients already"),
        OperationalError("database is locked"),
        InterfaceError("connection already closed"),
    ],
    ids=["out-of-connections", "locked", "closed"],
)
def test_a_database_that_cannot_take_the_request_is_a_503_to_retry(error):
    request = APIRequestFactory().get("/api/v1/moduleconfigs/?watch=true")

    response = exception_handler(error, {"request": request})

    assert response.status_code == 503
    assert response["Retry-After"] == str(DATABASE_RETRY_AFTER)
    assert response.data == {
        "detail": "the database cannot take the request now; retry shortly",
        "errors": [],
    }
    assert "too many clients" not in json.dumps(response.data)  # nothing of the server's internals


@pytest.mark.django_db
def test_a_query_the_database_refuses_as_wrong_is_a_500_not_a_503_to_retry():
    # Given a real error of this database for a statement that can never work (SQLite says
    # OperationalError "no such column", PostgreSQL ProgrammingError "column does not exist").
    with pytest.raises(DatabaseError) as raised, connection.cursor() as cursor:
        cursor.execute("SELECT no_such_column FROM controlplane_kyma")
    request = APIRequestFactory().get("/api/v1/kymas/")
    # Then the API does not ask the client to retry it: the error goes on to Django's 500.
    assert exception_handler(raised.value, {"request": request}) is None
    assert not database_unavailable(raised.value)


@pytest.mark.parametrize(
    ("cause", "unavailable"),
    [
        (sqlite3.OperationalError("database is locked"), True),
        (sqlite3.OperationalError("no such table: controlplane_kyma"), False),
        (psycopg.errors.TooManyConnections("sorry, too many clients already"), True),
        (psycopg.errors.AdminShutdown("terminating connection due to administrator command"), True),
        (psycopg.errors.QueryCanceled("canceling statement due to statement timeout"), True),
        (psycopg.errors.DeadlockDetected("deadlock detected"), True),
        (psycopg.OperationalError("connection failed: Connection refused"), True),
        (psycopg.errors.DiskFull("could not extend file"), True),
        (psycopg.errors.ProgramLimitExceeded("index row size exceeds maximum"), False),
    ],
    ids=lambda value: type(value).__name__ if isinstance(value, Exception) else str(value),
)
def test_an_operational_error_is_unavailable_only_when_the_driver_says_so(cause, unavailable):
    error = OperationalError(str(cause))
    error.__cause__ = cause
    assert database_unavailable(error) is unavailable
