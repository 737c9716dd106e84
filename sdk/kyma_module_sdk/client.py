"""HTTP calls to the control plane's API, with retries and backoff (``urllib`` only)."""

from __future__ import annotations

import json
import random
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

RETRIED_STATUSES = {429, 502, 503, 504}


class ApiError(Exception):
    """An answer the SDK will not retry (4xx other than 429), or retries that ran out."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(f"{status}: {detail}")
        self.status = status
        self.detail = detail


class Backoff:
    """Exponential delays with jitter: 0.2 s, 0.4 s, ... up to ``maximum``; ``reset`` on success."""

    def __init__(self, first: float = 0.2, maximum: float = 30.0) -> None:
        self.first, self.maximum, self.attempt = first, maximum, 0

    def next(self) -> float:
        delay = min(self.maximum, self.first * 2**self.attempt)
        self.attempt += 1
        return delay * random.uniform(0.5, 1.0)

    def reset(self) -> None:
        self.attempt = 0


def _detail(error: urllib.error.HTTPError) -> str:
    try:
        return json.loads(error.read()).get("detail", error.reason)
    except (ValueError, AttributeError, OSError):
        return str(error.reason)


class Client:
    """``api``: the API root, e.g. ``https://kcp.example.com/api/v1``; ``token``: an API token."""

    def __init__(self, api: str, token: str, *, timeout: float = 30, attempts: int = 6) -> None:
        self.api = api.rstrip("/")
        self.headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
        self.timeout = timeout
        self.attempts = attempts

    def _request(self, method: str, path: str, body: Any = None) -> urllib.request.Request:
        data = None if body is None else json.dumps(body).encode()
        headers = dict(self.headers, **({"Content-Type": "application/json"} if data is not None else {}))
        return urllib.request.Request(self.api + path, data=data, method=method, headers=headers)

    def call(self, method: str, path: str, body: Any = None, *, missing_ok: bool = False) -> Any:
        """One API call, retried with backoff on connection errors, 429 and 5xx gateways."""
        backoff = Backoff()
        for attempt in range(1, self.attempts + 1):
            try:
                with urllib.request.urlopen(
                    self._request(method, path, body), timeout=self.timeout
                ) as answer:
                    raw = answer.read()
                    return json.loads(raw) if raw else None
            except urllib.error.HTTPError as error:
                if error.code == 404 and missing_ok:
                    return None
                if error.code not in RETRIED_STATUSES or attempt == self.attempts:
                    raise ApiError(error.code, _detail(error)) from None
            except (urllib.error.URLError, OSError) as error:
                if attempt == self.attempts:
                    raise ApiError(0, f"{self.api} unreachable: {error}") from None
            time.sleep(backoff.next())
        raise AssertionError("unreachable")

    def moduleconfigs_after(self, module: str, revision: int, limit: int = 500) -> list[dict[str, Any]]:
        query = urllib.parse.urlencode({"module": module, "since_revision": revision, "limit": limit})
        return self.call("GET", f"/moduleconfigs/?{query}")["results"]

    def watch(self, module: str, revision: int, *, read_timeout: float = 60) -> Iterator[dict[str, Any]]:
        """Events of a ModuleConfig watch from ``revision`` (``{"type": ..., "object": ...}``);
        ends when the server ends the watch. Raises ``ApiError`` or ``OSError``."""
        query = urllib.parse.urlencode({"module": module, "since_revision": revision, "watch": "true"})
        try:
            answer = urllib.request.urlopen(
                self._request("GET", f"/moduleconfigs/?{query}"), timeout=read_timeout
            )
        except urllib.error.HTTPError as error:
            raise ApiError(error.code, _detail(error)) from None
        with answer:
            for line in answer:
                if line.strip():
                    yield json.loads(line)
