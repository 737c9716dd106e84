"""Kubernetes' timestamp format (RFC 3339, UTC, whole seconds): ``2026-11-23T09:41:51Z``."""

from __future__ import annotations

import datetime as dt

FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def rfc3339(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).strftime(FORMAT)


def parse_rfc3339(text: str) -> dt.datetime:
    return dt.datetime.strptime(text, FORMAT).replace(tzinfo=dt.UTC)
