"""``fleet.k8s.parallel.all_at_once``: independent runtime calls made at once (from
``AT_ONCE_FROM`` of them on), their results in order, at most ``RUNTIME_PARALLEL_CALLS`` in
flight, and no call left running when one fails."""

from __future__ import annotations

import threading

import pytest

from fleet.k8s.parallel import AT_ONCE_FROM, all_at_once


class InFlight:
    """Calls that each wait until ``together`` of them are running at once (or time out)."""

    def __init__(self, together: int) -> None:
        self.barrier = threading.Barrier(together, timeout=10)
        self.lock = threading.Lock()
        self.now = self.peak = 0
        self.threads: set[str] = set()

    def call(self, value: int):
        def run() -> int:
            with self.lock:
                self.now += 1
                self.peak = max(self.peak, self.now)
                self.threads.add(threading.current_thread().name)
            try:
                self.barrier.wait()
            finally:
                with self.lock:
                    self.now -= 1
            return value

        return run


def test_given_calls_that_wait_for_each_other_then_they_run_at_once_and_answer_in_order(settings):
    settings.RUNTIME_PARALLEL_CALLS = 4
    calls = InFlight(4)
    assert all_at_once([calls.call(n) for n in range(4)]) == [0, 1, 2, 3]
    assert calls.peak == 4
    assert threading.current_thread().name in calls.threads  # the caller makes one itself


def test_given_more_calls_than_allowed_at_once_then_they_go_in_groups_of_that_many(settings):
    settings.RUNTIME_PARALLEL_CALLS = 3
    calls = InFlight(3)
    assert all_at_once([calls.call(n) for n in range(9)]) == list(range(9))
    assert calls.peak == 3


def in_caller_thread(count: int, idle: int = 0) -> bool:
    names: list[str] = []
    calls = [lambda n=n: names.append(threading.current_thread().name) or n for n in range(count)]
    assert all_at_once(calls, idle=lambda: idle) == list(range(count))
    return set(names) == {threading.current_thread().name}


def test_given_one_call_at_a_time_then_each_runs_in_the_caller_thread(settings):
    settings.RUNTIME_PARALLEL_CALLS = 1
    assert in_caller_thread(AT_ONCE_FROM + 2)


def test_given_fewer_calls_than_a_new_connection_is_worth_then_they_run_in_turn(settings):
    settings.RUNTIME_PARALLEL_CALLS = 8
    assert in_caller_thread(AT_ONCE_FROM - 1)
    assert not in_caller_thread(AT_ONCE_FROM)


def test_given_an_idle_connection_for_each_call_then_even_a_few_run_at_once(settings):
    settings.RUNTIME_PARALLEL_CALLS = 8
    assert not in_caller_thread(2, idle=2)
    assert in_caller_thread(2, idle=1)  # (the second would open a connection)


def test_given_failing_calls_then_the_first_failure_in_order_is_raised_once_all_finished(settings):
    settings.RUNTIME_PARALLEL_CALLS = 4
    release = threading.Event()
    finished: list[str] = []

    def slow() -> None:
        release.wait(10)
        finished.append("slow")

    def fails(message: str):
        def run() -> None:
            if message == "second":
                release.set()  # the slow call ends only now: the raise must wait for it
            raise ValueError(message)

        return run

    with pytest.raises(ValueError, match="first"):
        all_at_once([fails("first"), slow, fails("second"), lambda: None])
    assert finished == ["slow"]
