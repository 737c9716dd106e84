"""Sessions that end: after ``SESSION_IDLE_SECONDS`` without a request, after
``SESSION_MAX_SECONDS`` whatever happens, and everywhere at once on logout.

The idle clock is written at most once a minute (not on every request: the Kyma page polls
every few seconds), and the session's own expiry follows it, so an abandoned session also
expires in the store."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.contrib.auth import logout
from django.http import HttpRequest, HttpResponse

from .services import login_recorded, sessions_end

STARTED, SEEN = "access_started", "access_seen"
SEEN_RESOLUTION = 60  # seconds between writes of the idle clock


class SessionLimits:
    """Ends a session that was idle too long or lived too long (the request goes on logged out)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        user = getattr(request, "user", None)
        session = getattr(request, "session", None)
        if session is not None and user is not None and user.is_authenticated:
            now = time.time()
            started, seen = session.get(STARTED, now), session.get(SEEN, now)
            if now - seen > settings.SESSION_IDLE_SECONDS or now - started > settings.SESSION_MAX_SECONDS:
                logout(request)
            elif now - seen >= SEEN_RESOLUTION or STARTED not in session:
                session[STARTED], session[SEEN] = started, now
                session.set_expiry(settings.SESSION_IDLE_SECONDS)
        return self.get_response(request)


def via_of(user: Any) -> str:
    backend = getattr(user, "backend", "")
    if backend.endswith("OIDCBackend"):
        return "oidc"
    return "break-glass" if settings.OIDC_ISSUER else "local"


def on_login(sender: Any, request: HttpRequest, user: Any, **kwargs: Any) -> None:
    now = time.time()
    session = getattr(request, "session", None)
    if session is not None:
        session[STARTED], session[SEEN] = now, now
        session.set_expiry(settings.SESSION_IDLE_SECONDS)
        if not session.session_key:
            session.save()
    login_recorded(user=user, via=via_of(user), session=session)


def on_logout(sender: Any, request: HttpRequest, user: Any, **kwargs: Any) -> None:
    if user is not None:
        sessions_end(user=user)
