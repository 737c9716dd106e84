"""Times as the control plane writes and shows them.

Documents and logs use Kubernetes' format (RFC 3339, UTC, whole seconds: ``2026-11-23T09:41:51Z``).
Pages show one format everywhere: the absolute time with seconds in the display time zone
(``2026-11-23 09:41:51 UTC``) and, beside it, how long ago that was (``5 min ago``).
"""

from __future__ import annotations

import datetime as dt

from django.utils import timezone

FORMAT = "%Y-%m-%dT%H:%M:%SZ"
DISPLAY_FORMAT = "%Y-%m-%d %H:%M:%S %Z"


def rfc3339(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).strftime(FORMAT)


def parse_rfc3339(text: str) -> dt.datetime:
    return dt.datetime.strptime(text, FORMAT).replace(tzinfo=dt.UTC)


def display(moment: dt.datetime) -> str:
    """``2026-11-23 09:41:51 UTC``: absolute, with seconds, in the display time zone (TIME_ZONE)."""
    return timezone.localtime(moment).strftime(DISPLAY_FORMAT)


def relative(moment: dt.datetime, now: dt.datetime | None = None) -> str:
    """``just now``, ``42 s ago``, ``5 min ago``, ``3 h 20 min ago``, ``2 d ago``, ``in 5 min``."""
    seconds = ((now or timezone.now()) - moment).total_seconds()
    future, seconds = seconds < 0, abs(seconds)
    if seconds < 1:
        return "just now"
    if seconds < 60:
        span = f"{int(seconds)} s"
    elif seconds < 3600:
        span = f"{int(seconds // 60)} min"
    elif seconds < 86400:
        hours, minutes = divmod(int(seconds // 60), 60)
        span = f"{hours} h {minutes} min" if minutes and hours < 10 else f"{hours} h"
    else:
        span = f"{int(seconds // 86400)} d"
    return f"in {span}" if future else f"{span} ago"


def parse_any(value: object) -> dt.datetime | None:
    """A datetime, or an RFC 3339 string from a status document (``lastTransitionTime``)."""
    if isinstance(value, dt.datetime):
        return value
    if isinstance(value, str) and value:
        try:
            return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
    return None
