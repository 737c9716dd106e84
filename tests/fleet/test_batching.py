"""Group commit: concurrent callers share a run, and each gets its own answer or error."""

from __future__ import annotations

import threading
import time

import pytest

from fleet.queue.batching import GroupCommit


def test_given_callers_arriving_during_a_run_then_they_share_the_next_and_get_their_own_answers():
    first_run_started, release = threading.Event(), threading.Event()
    runs: list[list[int]] = []

    def run(items):
        runs.append(list(items))
        if len(runs) == 1:
            first_run_started.set()
            release.wait(10)
        return [item * 10 if item != 7 else ValueError("seven") for item in items]

    batcher = GroupCommit(run)
    answers: dict[int, object] = {}

    def ask(item: int) -> None:
        try:
            answers[item] = batcher.call(item)
        except ValueError as exc:
            answers[item] = exc

    leader = threading.Thread(target=ask, args=(0,))
    leader.start()
    assert first_run_started.wait(10)
    followers = [threading.Thread(target=ask, args=(n,)) for n in range(1, 9)]
    for thread in followers:
        thread.start()
    deadline = time.monotonic() + 10
    while len(batcher._pending) < 8 and time.monotonic() < deadline:  # all queued behind the run
        threading.Event().wait(0.001)
    release.set()
    for thread in [leader, *followers]:
        thread.join(10)
    assert runs[0] == [0]
    assert sorted(runs[1]) == list(range(1, 9))  # one shared run, not eight
    assert {n: a for n, a in answers.items() if n != 7} == {n: n * 10 for n in range(9) if n != 7}
    assert str(answers[7]) == "seven"  # an error answer goes to its own caller only


def test_given_a_run_that_fails_then_its_callers_get_the_error_and_the_next_caller_leads():
    calls = []

    def run(items):
        calls.append(items)
        if len(calls) == 1:
            raise ConnectionError("down")
        return list(items)

    batcher = GroupCommit(run)
    with pytest.raises(ConnectionError):
        batcher.call(1)
    assert batcher.call(2) == 2
