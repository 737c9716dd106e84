"""Maintenance windows: upstream lifecycle-manager's policy shape, resolved for one runtime.

A policy is a JSON document (upstream's ``config/maintenance_windows/policy.json`` shape)::

    {"rules": [{"match": {"plan": "trial|free"},
                "windows": [{"days": ["Sat"], "begin": "21:00:00+00:00", "end": "00:00:00+00:00"}]}],
     "default": {"days": ["Sat"], "begin": "21:00:00+00:00", "end": "23:00:00+00:00"}}

A rule matches a runtime when any of its patterns (``plan``, ``region``, ``platformRegion``,
``globalAccountID``; regular expressions searched anywhere in the value, keys in any letter case as
Go's JSON decoder reads them) finds the runtime's non-empty attribute. The first matching rule
decides: its first window still to come is the runtime's; when it has none left, the ``default``
window is. A window with ``days`` recurs on those weekdays between two times of day with a UTC
offset (ending at or before its beginning: it runs past midnight); a window without ``days`` is
one absolute span (RFC 3339 ``begin`` and ``end``).

A module version that requires downtime reaches an existing installation only while its runtime's
window is *active*: the window has begun and at least ``min_size`` of it is left (upstream's
``--min-maintenance-window-size``, 20 minutes), so an upgrade never starts in a window's last
minutes. Everything here is pure (no Django, no database): the caller passes the time.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
# The runtime attributes a rule can match, as upstream names them (the JSON keys, any case).
ATTRIBUTES = ("globalAccountID", "plan", "region", "platformRegion")
_TIME_OF_DAY = re.compile(r"^(\d{2}):(\d{2}):(\d{2})(Z|[+-]\d{2}:\d{2})$")
# A weekly window recurs within a week; the day before is looked at too, for a window that began
# yesterday and runs past midnight (upstream starts from today and misses it while it runs).
_LOOKAHEAD_DAYS = 9


class PolicyError(ValueError):
    """The policy document is not upstream's shape; the message names the field."""


@dataclass(frozen=True)
class Runtime:
    """The attributes rules match (upstream's resolver.Runtime, the fields it compares)."""

    global_account_id: str = ""
    plan: str = ""
    region: str = ""
    platform_region: str = ""

    def value(self, attribute: str) -> str:
        return {
            "globalAccountID": self.global_account_id,
            "plan": self.plan,
            "region": self.region,
            "platformRegion": self.platform_region,
        }[attribute]


@dataclass(frozen=True)
class ResolvedWindow:
    begin: dt.datetime
    end: dt.datetime

    def active(self, now: dt.datetime) -> bool:
        return self.begin < now < self.end


@dataclass(frozen=True)
class Window:
    """One window: weekly (``days`` and times of day) or absolute (``days`` empty)."""

    days: tuple[str, ...]
    begin: dt.datetime | dt.time
    end: dt.datetime | dt.time

    def next(self, at: dt.datetime, *, ongoing: bool, min_size: dt.timedelta) -> ResolvedWindow | None:
        """The first occurrence still usable at ``at``: one that begins later, or (``ongoing``)
        one that ends more than ``min_size`` after ``at`` (begun already or not)."""
        if not self.days:
            assert isinstance(self.begin, dt.datetime) and isinstance(self.end, dt.datetime)
            return _within(at, self.begin, self.end, ongoing, min_size)
        assert isinstance(self.begin, dt.time) and isinstance(self.end, dt.time)
        zone = self.begin.tzinfo or dt.UTC
        day = at.astimezone(dt.UTC).date() - dt.timedelta(days=1)
        begin = dt.datetime.combine(day, self.begin.replace(tzinfo=None), tzinfo=zone)
        end = dt.datetime.combine(day, self.end.replace(tzinfo=None), tzinfo=self.end.tzinfo or dt.UTC)
        if end <= begin:  # past midnight
            end += dt.timedelta(days=1)
        for _ in range(_LOOKAHEAD_DAYS):
            if DAYS[begin.weekday()] in self.days:
                found = _within(at, begin, end, ongoing, min_size)
                if found is not None:
                    return found
            begin += dt.timedelta(days=1)
            end += dt.timedelta(days=1)
        return None


def _within(
    at: dt.datetime, begin: dt.datetime, end: dt.datetime, ongoing: bool, min_size: dt.timedelta
) -> ResolvedWindow | None:
    if ongoing:
        return ResolvedWindow(begin, end) if at + min_size < end else None
    return ResolvedWindow(begin, end) if at < begin else None


@dataclass(frozen=True)
class Rule:
    match: dict[str, re.Pattern[str]]
    windows: tuple[Window, ...]

    def matches(self, runtime: Runtime) -> bool:
        return any(
            (value := runtime.value(attribute)) and pattern.search(value)
            for attribute, pattern in self.match.items()
        )


@dataclass(frozen=True)
class Policy:
    rules: tuple[Rule, ...]
    default: Window | None

    def resolve(
        self,
        runtime: Runtime,
        at: dt.datetime,
        *,
        ongoing: bool = False,
        min_size: dt.timedelta | None = None,
    ) -> ResolvedWindow | None:
        """The runtime's next window (upstream's ``Resolve``: first matching rule only, then the
        default). ``ongoing``: a window already begun counts while ``min_size`` of it is left."""
        size = min_size if min_size is not None else dt.timedelta(hours=1)
        for rule in self.rules:
            if not rule.matches(runtime):
                continue
            for window in rule.windows:
                found = window.next(at, ongoing=ongoing, min_size=size)
                if found is not None:
                    return found
            break
        if self.default is None:
            return None
        return self.default.next(at, ongoing=ongoing, min_size=size)

    def active(self, runtime: Runtime, now: dt.datetime, min_size: dt.timedelta) -> ResolvedWindow | None:
        """The window the runtime is in now (with at least ``min_size`` left), else ``None``."""
        window = self.resolve(runtime, now, ongoing=True, min_size=min_size)
        return window if window is not None and window.active(now) else None

    def upcoming(self, runtime: Runtime, now: dt.datetime, min_size: dt.timedelta) -> ResolvedWindow | None:
        """The window in effect now or the next one to open (what a page tells a person)."""
        return self.active(runtime, now, min_size) or self.resolve(runtime, now)


def _keys(raw: Mapping[str, Any], where: str, allowed: tuple[str, ...]) -> dict[str, Any]:
    """``raw`` with its keys in ``allowed``'s spelling (Go's decoder ignores case); unknown keys
    are an error here rather than silently ignored (a misspelt ``begin`` would become midnight)."""
    spelled = {name.lower(): name for name in allowed}
    found: dict[str, Any] = {}
    for key, value in raw.items():
        name = spelled.get(str(key).lower())
        if name is None:
            raise PolicyError(f"{where}.{key}: unknown field (expected {', '.join(allowed)})")
        found[name] = value
    return found


def _time_of_day(text: Any, where: str) -> dt.time:
    match = _TIME_OF_DAY.match(text) if isinstance(text, str) else None
    if match is None:
        raise PolicyError(f"{where}: {text!r} is not a time of day with its offset, e.g. 21:00:00+00:00")
    hours, minutes, seconds, offset = match.groups()
    if offset == "Z":
        zone = dt.UTC
    else:
        sign = 1 if offset[0] == "+" else -1
        zone = dt.timezone(sign * dt.timedelta(hours=int(offset[1:3]), minutes=int(offset[4:6])))
    try:
        return dt.time(int(hours), int(minutes), int(seconds), tzinfo=zone)
    except ValueError as exc:
        raise PolicyError(f"{where}: {text!r}: {exc}") from exc


def _moment(text: Any, where: str) -> dt.datetime:
    try:
        moment = dt.datetime.fromisoformat(text.replace("Z", "+00:00")) if isinstance(text, str) else None
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is None:
        raise PolicyError(f"{where}: {text!r} is not an RFC 3339 time (a window without days is absolute)")
    return moment


def _window(raw: Any, where: str) -> Window:
    if not isinstance(raw, Mapping):
        raise PolicyError(f"{where}: a window is an object with days, begin and end")
    fields = _keys(raw, where, ("days", "begin", "end"))
    for name in ("begin", "end"):
        if name not in fields:
            raise PolicyError(f"{where}.{name}: required")
    days = fields.get("days") or []
    if not isinstance(days, list) or any(day not in DAYS for day in days):
        raise PolicyError(f"{where}.days: a list of {', '.join(DAYS)}")
    if days:
        begin: dt.datetime | dt.time = _time_of_day(fields["begin"], f"{where}.begin")
        end: dt.datetime | dt.time = _time_of_day(fields["end"], f"{where}.end")
    else:
        begin, end = _moment(fields["begin"], f"{where}.begin"), _moment(fields["end"], f"{where}.end")
    return Window(tuple(days), begin, end)


def _rule(raw: Any, where: str) -> Rule:
    if not isinstance(raw, Mapping):
        raise PolicyError(f"{where}: a rule is an object with match and windows")
    fields = _keys(raw, where, ("match", "windows"))
    match_raw = fields.get("match")
    if not isinstance(match_raw, Mapping):
        raise PolicyError(f"{where}.match: an object of patterns ({', '.join(ATTRIBUTES)})")
    match: dict[str, re.Pattern[str]] = {}
    for attribute, pattern in _keys(match_raw, f"{where}.match", ATTRIBUTES).items():
        if not isinstance(pattern, str):
            raise PolicyError(f"{where}.match.{attribute}: a regular expression (text)")
        if not pattern:
            continue  # upstream: an empty pattern matches nothing
        try:
            match[attribute] = re.compile(pattern)
        except re.error as exc:
            raise PolicyError(
                f"{where}.match.{attribute}: {pattern!r} is not a regular expression: {exc}"
            ) from exc
    windows = fields.get("windows")
    if not isinstance(windows, list):
        raise PolicyError(f"{where}.windows: a list of windows")
    return Rule(match, tuple(_window(w, f"{where}.windows[{i}]") for i, w in enumerate(windows)))


def parse_policy(raw: Any) -> Policy:
    """A policy from its decoded JSON (or its text); raises :class:`PolicyError` naming the field."""
    if isinstance(raw, str | bytes):
        try:
            raw = json.loads(raw)
        except ValueError as exc:
            raise PolicyError(f"not JSON: {exc}") from exc
    if not isinstance(raw, Mapping):
        raise PolicyError("policy: an object with rules and default")
    fields = _keys(raw, "policy", ("rules", "default"))
    rules = fields.get("rules") or []
    if not isinstance(rules, list):
        raise PolicyError("policy.rules: a list of rules")
    default = fields.get("default")
    return Policy(
        tuple(_rule(rule, f"policy.rules[{index}]") for index, rule in enumerate(rules)),
        _window(default, "policy.default") if default else None,
    )


def read_policy_file(path: str) -> Policy:
    """The policy in a file (``MAINTENANCE_POLICY_FILE``); :class:`PolicyError` names the file."""
    try:
        with open(path, "rb") as handle:
            content = handle.read()
    except OSError as exc:
        raise PolicyError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        return parse_policy(content)
    except PolicyError as exc:
        raise PolicyError(f"{path}: {exc}") from None
