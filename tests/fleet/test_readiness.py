"""Readiness checks run side by side and the answer never waits longer than the time limit."""

from __future__ import annotations

import threading

from kernel.readiness import readiness, run_checks


def test_given_a_check_that_does_not_return_when_running_checks_then_reported_as_not_answering():
    release = threading.Event()
    try:
        answers = run_checks({"quick": lambda: None, "stuck": lambda: release.wait(60) and None}, timeout=0.2)
    finally:
        release.set()
    assert answers == {"quick": "ok", "stuck": "stuck did not answer within 0.2 s"}


def test_given_a_check_that_raises_when_running_checks_then_its_reason_names_it():
    def broken() -> str | None:
        raise RuntimeError("boom")

    assert run_checks({"broken": broken}) == {"broken": "broken check failed: RuntimeError: boom"}


def test_given_one_failing_check_when_answering_readyz_then_503_with_every_check_named():
    status, body = readiness({"database": lambda: None, "broker": lambda: "broker unreachable: refused"})
    assert status == 503
    assert body["status"] == "unavailable"
    assert body["checks"] == {"database": "ok", "broker": "broker unreachable: refused"}
