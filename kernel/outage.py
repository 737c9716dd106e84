"""A loop that needs the database while it is away: one line when it goes, one per retry, one when
it is back. Never a traceback per attempt.

Every role has loops that talk to the database (beat's lease, the listener's event recorder and
its TLS refresh, the worker's tasks). During an outage each attempt fails the same way; a loop
that logged each failure with its traceback filled the log (a leading beat: 1,055 tracebacks,
6.5 MB, in a 20 s cut). A loop keeps an :class:`Outage` instead:

- :meth:`Outage.failed` on each failed attempt: the first logs the outage (what stopped, the
  error's class and first line, when the next try is), each later one a single line with how long
  it has lasted; it returns the delay before the next try, doubling from ``first`` to ``most``.
- :meth:`Outage.recovered` after an attempt that worked: one line saying how long it lasted (and
  nothing when there was no outage, so a loop calls it every time).

Thread-safe: two threads of one role may report into one outage (beat's lease keeper and its
scheduler).
"""

from __future__ import annotations

import logging
import threading
import time


def describe(exc: BaseException) -> str:
    """The error in one line: its class and the first line of its message."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:300]}" if text else type(exc).__name__


class Outage:
    """The state of one loop's outage (see the module docstring)."""

    def __init__(
        self, log: logging.Logger, what: str, *, first: float = 0.5, most: float = 10.0, doing: str = ""
    ) -> None:
        self.log = log
        self.what = what
        self.first = first
        self.most = max(first, most)
        self.doing = doing
        self._lock = threading.Lock()
        self._since: float | None = None
        self._tries = 0
        self._delay = first

    @property
    def down(self) -> bool:
        return self._since is not None

    def failed(self, exc: BaseException) -> float:
        """An attempt failed because the database is away: log it (once per outage, then a line
        per retry) and return the seconds to wait before the next try."""
        with self._lock:
            now = time.monotonic()
            if self._since is None:
                self._since, self._tries, self._delay = now, 1, self.first
                doing = f"; {self.doing}" if self.doing else ""
                self.log.warning(
                    "%s: the database is unreachable (%s)%s; retrying in %g s",
                    self.what,
                    describe(exc),
                    doing,
                    self._delay,
                )
                return self._delay
            self._tries += 1
            self._delay = min(self.most, self._delay * 2)
            self.log.warning(
                "%s: the database is still unreachable after %.1f s (try %d: %s); next try in %g s",
                self.what,
                now - self._since,
                self._tries,
                describe(exc),
                self._delay,
            )
            return self._delay

    def recovered(self) -> None:
        """An attempt worked: end the outage, if there was one, with one line."""
        if self._since is None:
            return
        with self._lock:
            if self._since is None:
                return
            lasted, tries = time.monotonic() - self._since, self._tries
            self._since, self._tries, self._delay = None, 0, self.first
        self.log.warning(
            "%s: the database answers again after %.1f s (%d failed tr%s)",
            self.what,
            lasted,
            tries,
            "y" if tries == 1 else "ies",
        )
