"""Issued keys (named API tokens, module credentials): shown once in clear, stored as a SHA-256
digest, optionally expiring, revocable; their name and expiry editable, the row deletable. Every
one of these writes is recorded in the audit trail (never the key: only its prefix).

Keys start with ``KEY_PREFIX`` so the authentication class can tell them from DRF's older
``authtoken`` keys (40 hex characters) and leave those to DRF's own classes. A key carries 256
random bits, so an unsalted SHA-256 digest is enough (no password hashing: nothing to guess).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import secrets
from typing import TypeVar

from django.contrib.auth.base_user import AbstractBaseUser
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from kernel import audit
from kernel.errors import ValidationFailed
from kernel.models import ApiToken, IssuedKey
from kernel.timefmt import rfc3339

KEY_PREFIX = "kcp_"
# Characters of the key kept in clear to recognise it: the marker and 8 random characters.
VISIBLE_RANDOM = 8
VISIBLE = len(KEY_PREFIX) + VISIBLE_RANDOM
# ``last_used_at`` is written at most this often per token (not one UPDATE per request).
LAST_USED_RESOLUTION = dt.timedelta(minutes=1)


class KeyRefused(Exception):
    """A key that exists but no longer works; the message says why (it becomes the 401's detail)."""


class TokenExpired(KeyRefused):
    def __init__(self, expires_at: dt.datetime) -> None:
        super().__init__(f"token expired on {rfc3339(expires_at)}")
        self.expires_at = expires_at


class KeyRevoked(KeyRefused):
    def __init__(self, revoked_at: dt.datetime) -> None:
        super().__init__(f"token revoked on {rfc3339(revoked_at)}")
        self.revoked_at = revoked_at


def key_digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def is_api_token_key(key: str) -> bool:
    return key.startswith(KEY_PREFIX)


K = TypeVar("K", bound=IssuedKey)


@transaction.atomic
def key_issue(obj: IssuedKey, *, marker: str = KEY_PREFIX) -> str:
    """Give the unsaved ``obj`` (owner, name, expiry set) a new key starting with ``marker``,
    validate and save it. Returns the clear key: the only time anyone sees it."""
    key = marker + secrets.token_urlsafe(32)
    obj.prefix = key[: len(marker) + VISIBLE_RANDOM]
    obj.digest = key_digest(key)
    try:
        obj.full_clean()
    except DjangoValidationError as exc:
        raise ValidationFailed.from_django(exc) from exc
    obj.save()
    audit.record_object(obj, action="create", changes=_key_facts(obj))
    return key


def key_authenticate(queryset: QuerySet[K], key: str) -> K | None:
    """The issued key of ``queryset`` whose key is ``key`` (``None`` when there is none).

    Raises ``KeyRevoked`` or ``TokenExpired`` for one that no longer works; records when a
    working one was last used (at most once per ``LAST_USED_RESOLUTION``)."""
    obj = queryset.filter(digest=key_digest(key)).first()
    if obj is None:
        return None
    now = timezone.now()
    if obj.revoked_at is not None:
        raise KeyRevoked(obj.revoked_at)
    if obj.expires_at is not None and obj.expires_at <= now:
        raise TokenExpired(obj.expires_at)
    if obj.last_used_at is None or now - obj.last_used_at >= LAST_USED_RESOLUTION:
        type(obj).objects.filter(pk=obj.pk).update(last_used_at=now)
        obj.last_used_at = now
    return obj


@transaction.atomic
def key_save(obj: IssuedKey) -> None:
    """Store an edit of an issued key (its name, its expiry); the key, its owner and its revocation
    are not edited here. Validated, and recorded with what changed."""
    before = audit.stored_values(obj)
    try:
        obj.full_clean()
    except DjangoValidationError as exc:
        raise ValidationFailed.from_django(exc) from exc
    obj.save()
    audit.record_change(obj, before=before)


@transaction.atomic
def key_delete(obj: IssuedKey) -> None:
    """Delete an issued key's row (revoking keeps it, for the record; this does not): recorded with
    what the row said of the key."""
    audit.record_object(obj, action="delete", changes=_key_facts(obj, gone=True))
    obj.delete()


@transaction.atomic
def key_revoke(obj: IssuedKey) -> bool:
    """Revoke ``obj`` for good (the row stays, for the record). False when it already was."""
    if obj.revoked_at is not None:
        return False
    obj.revoked_at = timezone.now()
    type(obj).objects.filter(pk=obj.pk).update(revoked_at=obj.revoked_at)
    revoked = {"field": "revoked_at", "before": None, "after": rfc3339(obj.revoked_at)}
    audit.record_object(obj, action="revoke", changes=[revoked])
    return True


def _key_facts(obj: IssuedKey, *, gone: bool = False) -> list[dict[str, object]]:
    """What an audit entry says of a key made (or, ``gone``, deleted): never the key, only what
    the admin shows of it."""
    facts = {
        "owner": audit.identity(obj)[1],
        "prefix": f"{obj.prefix}…",
        "expires_at": rfc3339(obj.expires_at) if obj.expires_at else None,
    }
    return [
        {"field": field, "before": value if gone else None, "after": None if gone else value}
        for field, value in facts.items()
        if value
    ]


def api_token_issue(token: ApiToken) -> str:
    """Give the unsaved ``token`` (user, name, expiry set) a new key, validate and save it.

    Returns the clear key: the only time anyone sees it."""
    return key_issue(token)


def api_token_create(
    *, user: AbstractBaseUser, name: str, expires_at: dt.datetime | None = None
) -> tuple[ApiToken, str]:
    """A new token for ``user``; returns it with its clear key (shown once, never stored)."""
    token = ApiToken(user=user, name=name, expires_at=expires_at)
    return token, api_token_issue(token)


def api_token_save(*, token: ApiToken) -> None:
    """Store an edit of ``token`` (name, expiry): see :func:`key_save`."""
    key_save(token)


def api_token_delete(*, token: ApiToken) -> None:
    """Delete ``token``'s row: see :func:`key_delete`."""
    key_delete(token)


def api_token_authenticate(key: str) -> ApiToken | None:
    """The token whose key is ``key`` (``None`` when there is none), with its user loaded.

    Raises ``KeyRefused`` for an expired or revoked one; records when a valid one was last used."""
    return key_authenticate(ApiToken.objects.select_related("user"), key)
