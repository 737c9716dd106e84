"""kernel.outage: one line when the database goes, one per retry with a growing delay, one when it
is back; a request path's failures in between are counted, not logged one by one."""

from __future__ import annotations

import logging
import time

from django.db import OperationalError

from kernel.outage import Outage

log = logging.getLogger("tests.outage")


def refused() -> OperationalError:
    return OperationalError("connection refused\n\tIs the server running?")


def test_given_failed_tries_then_the_delay_doubles_up_to_most_and_each_try_is_one_line(caplog):
    outage = Outage(log, "loop", first=0.5, most=3.0)
    with caplog.at_level(logging.WARNING, logger="tests.outage"):
        delays = [outage.failed(refused()) for _ in range(5)]
        outage.recovered()
        outage.recovered()  # no outage: nothing to say

    assert delays == [0.5, 1.0, 2.0, 3.0, 3.0]
    lines = [record.getMessage() for record in caplog.records]
    assert len(lines) == 6
    assert (
        lines[0]
        == "loop: the database is unreachable (OperationalError: connection refused); retrying in 0.5 s"
    )
    assert all("still unreachable" in line and "\n" not in line for line in lines[1:5])
    assert lines[5].startswith("loop: the database answers again after") and "(5 failed tries)" in lines[5]
    assert not [record for record in caplog.records if record.exc_info]


def test_given_a_request_path_failing_often_then_lines_come_only_as_the_delay_grows(caplog):
    outage = Outage(log, "requests", first=0.05, most=1.0)
    with caplog.at_level(logging.WARNING, logger="tests.outage"):
        ends = time.monotonic() + 0.5
        failures = 0
        while time.monotonic() < ends:
            outage.happened(refused())
            failures += 1
            time.sleep(0.001)

    lines = [record.getMessage() for record in caplog.records]
    assert failures > 100
    # 0.05, then 0.1, 0.2, 0.4 s apart: a handful of lines for hundreds of failures.
    assert 2 <= len(lines) <= 6, lines
    assert "more since the last line" in lines[-1]
