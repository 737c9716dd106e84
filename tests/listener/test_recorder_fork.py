"""The event recorder's writer thread belongs to a process: a forked child (a gunicorn worker)
starts its own on its first event, without asking the system for its id on every event."""

from __future__ import annotations

import os

from django.utils import timezone

from listener.events import parse_event
from listener.recorder import EventRecorder

BODY = b'{"watched": {"Name": "b"}, "watchedGvk": {"version": "v1", "kind": "K"}}'


def test_given_a_forked_child_when_its_first_event_comes_then_it_starts_its_own_writer():
    recorder = EventRecorder()
    recorder._pid = os.getpid()  # as if this process had started its writer already
    event = parse_event("v2", "lifecycle-manager", BODY)

    child = os.fork()
    if child == 0:  # pragma: no cover - the child reports through its exit status only
        try:
            recorder.add(1, event, "queued", timezone.now())
            started = recorder._pid == os.getpid() and recorder._thread is not None
            os._exit(0 if started and recorder._thread.is_alive() else 1)
        finally:
            os._exit(2)
    _, status = os.waitpid(child, 0)

    assert os.waitstatus_to_exitcode(status) == 0
    recorder.add(1, event, "queued", timezone.now())
    assert recorder._thread is None  # the parent's writer counts as started: none made here
