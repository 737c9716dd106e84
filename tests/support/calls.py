"""How often a function runs, counted by the interpreter's profile hook on the calling thread.

Nothing is replaced: the function runs as it is, from wherever the code under test calls it, so
a count is of the real code path (a mock would count only the calls that reach the mock, and
change what the code does). The hook sees every call of the thread while it is set, which slows
the code a little; a profiler set before is put back afterwards.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType
from typing import Any


@dataclass
class Calls:
    count: int = 0


@contextmanager
def calls_of(function: Callable[..., Any]) -> Iterator[Calls]:
    """The calls of ``function`` made on this thread while the block runs, counted as they are
    made: ``with calls_of(catalog.desired) as renders: ...; assert renders.count == 1``."""
    code = function.__code__
    calls = Calls()
    before = sys.getprofile()

    def hook(frame: FrameType, event: str, _arg: object) -> None:
        if event == "call" and frame.f_code is code:
            calls.count += 1

    sys.setprofile(hook)
    try:
        yield calls
    finally:
        sys.setprofile(before)
