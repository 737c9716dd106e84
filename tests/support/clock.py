"""A clock the test moves by hand, for code that takes a clock callable (monotonic seconds):
``clock = Clock(); cache = TTLCache(..., clock=clock); clock.now += 1.5``. A boundary fake, as
the runtime emulator is: nothing waits, and a test says exactly when time passes."""

from __future__ import annotations


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now
