"""API errors that are not the client's: a database that cannot take the request is a 503 with
Retry-After (the SDK and other clients retry), never a 500."""

from __future__ import annotations

import json

import pytest
from django.db import InterfaceError, OperationalError
from rest_framework.test import APIRequestFactory

from kernel.api.errors import DATABASE_RETRY_AFTER, exception_handler


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
