"""Argument types of the management commands: a value no computation can take is argparse's
one-line error naming the accepted range (a ``CommandError`` under ``call_command``), before
anything computes with it, never a traceback from deep inside (``OverflowError`` from
``datetime``, a ``nan`` that makes a wait endless)."""

from __future__ import annotations

import argparse
import math

# An expiry a century away is no expiry: leave the option out. The bound keeps ``now + days``
# far inside ``datetime``'s range (year 9999), whatever the clock says.
MAX_EXPIRY_DAYS = 36_500


def expiry_days(text: str) -> int:
    """``--expires-in-days N``: a whole number of days, 1 to ``MAX_EXPIRY_DAYS``."""
    try:
        days = int(text)
    except ValueError:  # not a number, or more digits than int() converts
        days = 0
    if not 1 <= days <= MAX_EXPIRY_DAYS:
        raise argparse.ArgumentTypeError(
            f"{text[:40]!r} is not a whole number of days at least 1 and at most {MAX_EXPIRY_DAYS:,} "
            "(100 years); leave the option out for no expiry"
        )
    return days


def seconds(text: str) -> float:
    """A duration in seconds: a finite number, 0 or more."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a number of seconds (finite, 0 or more)")
    return value
