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
        self._skipped = 0
        self._said_at = 0.0
        self._failed_at = 0.0

    @property
    def down(self) -> bool:
        return self._since is not None

    def failed(self, exc: BaseException, *, note: str = "") -> float:
        """An attempt failed because the database is away: log it (once per outage, then a line
        per retry) and return the seconds to wait before the next try."""
        with self._lock:
            now = time.monotonic()
            if self._since is None:
                self._since, self._tries, self._delay = now, 1, self.first
                doing = f"; {self.doing}" if self.doing else ""
                self.log.warning(
                    "%s: the database is unreachable (%s%s)%s; retrying in %g s",
                    self.what,
                    describe(exc),
                    note,
                    doing,
                    self._delay,
                )
                return self._delay
            self._tries += 1
            self._delay = min(self.most, self._delay * 2)
            self.log.warning(
                "%s: the database is still unreachable after %.1f s (try %d: %s%s); next try in %g s",
                self.what,
                now - self._since,
                self._tries,
                describe(exc),
                note,
                self._delay,
            )
            return self._delay

    def happened(self, exc: BaseException) -> None:
        """For a path that does not retry by itself (requests, each answered 503): the first
        failure logs the outage, later ones only once the current delay has passed since the
        last line (growing, as :meth:`failed`'s), counting those in between. Nothing says when
        such a path works again (its successes need not have used the database): a failure
        after ``most`` seconds without one counts as a new outage."""
        with self._lock:
            self._skipped += 1
            now = time.monotonic()
            if self._since is not None and now - self._failed_at > self.most:
                self._since, self._skipped = None, 1
            self._failed_at = now
            if self._since is not None and now - self._said_at < self._delay:
                return
            skipped, self._skipped, self._said_at = self._skipped - 1, 0, now
        self.failed(exc, note=f"; {skipped} more since the last line" if skipped else "")

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
