"""Named API tokens: issued once in clear, stored as a SHA-256 digest, optionally expiring.

Keys start with ``KEY_PREFIX`` so the authentication class can tell them from DRF's older
``authtoken`` keys (40 hex characters) and leave those to DRF's own classes. A key carries 256
random bits, so an unsalted SHA-256 digest is enough (no password hashing: nothing to guess).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import secrets

from django.contrib.auth.base_user import AbstractBaseUser
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import transaction
from django.utils import timezone

from kernel.errors import ValidationFailed
from kernel.models import ApiToken
from kernel.timefmt import rfc3339

KEY_PREFIX = "kcp_"
# Characters of the key kept in clear to recognise it: the marker and 8 random characters.
VISIBLE = len(KEY_PREFIX) + 8
# ``last_used_at`` is written at most this often per token (not one UPDATE per request).
LAST_USED_RESOLUTION = dt.timedelta(minutes=1)


class TokenExpired(Exception):
    def __init__(self, expires_at: dt.datetime) -> None:
        super().__init__(f"token expired on {rfc3339(expires_at)}")
        self.expires_at = expires_at


def key_digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def is_api_token_key(key: str) -> bool:
    return key.startswith(KEY_PREFIX)


@transaction.atomic
def api_token_issue(token: ApiToken) -> str:
    """Give the unsaved ``token`` (user, name, expiry set) a new key, validate and save it.

    Returns the clear key: the only time anyone sees it."""
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    token.prefix = key[:VISIBLE]
    token.digest = key_digest(key)
    try:
        token.full_clean()
    except DjangoValidationError as exc:
        raise ValidationFailed.from_django(exc) from exc
    token.save()
    return key


def api_token_create(
    *, user: AbstractBaseUser, name: str, expires_at: dt.datetime | None = None
) -> tuple[ApiToken, str]:
    """A new token for ``user``; returns it with its clear key (shown once, never stored)."""
    token = ApiToken(user=user, name=name, expires_at=expires_at)
    return token, api_token_issue(token)


def api_token_authenticate(key: str) -> ApiToken | None:
    """The token whose key is ``key`` (``None`` when there is none), with its user loaded.

    Raises ``TokenExpired`` for an expired one; records when a valid one was last used."""
    token = ApiToken.objects.select_related("user").filter(digest=key_digest(key)).first()
    if token is None:
        return None
    now = timezone.now()
    if token.expires_at is not None and token.expires_at <= now:
        raise TokenExpired(token.expires_at)
    if token.last_used_at is None or now - token.last_used_at >= LAST_USED_RESOLUTION:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now
    return token
