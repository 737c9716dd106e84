"""The gunicorn worker of both HTTP roles (web, listener): gunicorn's own answers are JSON too.

Some requests never reach the application: a request line over ``limit_request_line`` (414), a
header too large (431), a malformed request (400). gunicorn answers those itself with an HTML
page, where every other answer of these roles is JSON with a ``detail``. This worker lets
gunicorn decide the status and message as it always does, and writes them as the JSON error shape
(``{"detail": ..., "errors": []}``) instead. Imported by gunicorn's master before Django is set up:
it imports nothing of the project.
"""

from __future__ import annotations

import html
import json
import re
from typing import Any

from gunicorn.workers.gthread import ThreadWorker

_STATUS = re.compile(rb"^HTTP/1\.[01] (\d{3}) ([^\r\n]*)\r\n")
_MESSAGE = re.compile(rb"</h1>\s*(.*?)\s*</body>", re.S)


def json_error(answer: bytes) -> bytes:
    """gunicorn's HTML error answer (``util.write_error``) as the JSON error shape; anything else
    unchanged."""
    status = _STATUS.match(answer)
    if status is None:
        return answer
    message = _MESSAGE.search(answer)
    reason = status.group(2).decode("latin-1")
    detail = (html.unescape(message.group(1).decode("latin-1")) if message else "") or reason
    body = json.dumps({"detail": detail, "errors": []}).encode()
    head = (
        f"HTTP/1.1 {status.group(1).decode()} {reason}\r\nConnection: close\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode("latin-1") + body


class _JsonErrorSocket:
    """The client socket, as gunicorn's error writer sees it: what it sends becomes JSON."""

    def __init__(self, sock: Any) -> None:
        self._sock = sock

    def sendall(self, data: bytes) -> Any:
        return self._sock.sendall(json_error(data))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


class JsonErrorThreadWorker(ThreadWorker):
    """gunicorn's threaded worker (``gthread``) whose own error answers are JSON."""

    def handle_error(self, req: Any, client: Any, addr: Any, exc: BaseException) -> None:
        super().handle_error(req, _JsonErrorSocket(client), addr, exc)
