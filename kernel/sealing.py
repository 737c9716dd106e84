"""Encryption at rest for private keys and kubeconfigs.

Values are sealed with Fernet (AES-128-CBC + HMAC-SHA256) under the keys of
``CONTROLPLANE_ENCRYPTION_KEYS``: the first key encrypts, every key decrypts, so keys rotate by
prepending a new one and running ``manage.py reencrypt``. A :class:`Sealed` value never shows its
plaintext in ``repr``/``str`` (logs, admin, tracebacks); code must call :meth:`Sealed.reveal`
explicitly where the plaintext is really needed.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable
from typing import Any

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.apps import apps
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import models, transaction


class SealedSecretError(Exception):
    """A sealed value cannot be opened with any configured key."""


@functools.cache
def _cipher(keys: tuple[str, ...]) -> MultiFernet:
    if not keys:
        raise ImproperlyConfigured("CONTROLPLANE_ENCRYPTION_KEYS is empty")
    return MultiFernet([Fernet(key) for key in keys])


def cipher() -> MultiFernet:
    return _cipher(tuple(settings.ENCRYPTION_KEYS))


class Sealed:
    """An encrypted secret; the token is what the database stores."""

    __slots__ = ("_token",)

    def __init__(self, token: str = "") -> None:
        self._token = token

    @classmethod
    def seal(cls, plaintext: str | bytes) -> Sealed:
        if not plaintext:
            return cls("")
        data = plaintext.encode() if isinstance(plaintext, str) else plaintext
        return cls(cipher().encrypt(data).decode("ascii"))

    @property
    def token(self) -> str:
        return self._token

    def reveal_bytes(self) -> bytes:
        if not self._token:
            return b""
        try:
            return cipher().decrypt(self._token.encode("ascii"))
        except InvalidToken as exc:
            raise SealedSecretError(
                "cannot decrypt a stored secret with CONTROLPLANE_ENCRYPTION_KEYS (was a key removed?)"
            ) from exc

    def reveal(self) -> str:
        return self.reveal_bytes().decode()

    def digest(self) -> str:
        """SHA-256 of the plaintext: notices a changed secret without keeping it around."""
        return hashlib.sha256(self.reveal_bytes()).hexdigest()

    def rotated(self) -> Sealed:
        """The same secret encrypted under the current primary key."""
        if not self._token:
            return self
        try:
            return Sealed(cipher().rotate(self._token.encode("ascii")).decode("ascii"))
        except InvalidToken as exc:
            raise SealedSecretError("cannot re-encrypt a stored secret: no configured key opens it") from exc

    def __bool__(self) -> bool:
        return bool(self._token)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sealed) and other._token == self._token

    def __hash__(self) -> int:
        return hash(self._token)

    def __repr__(self) -> str:
        return "<Sealed: set>" if self._token else "<Sealed: empty>"

    __str__ = __repr__

    def __reduce__(self) -> tuple[Any, ...]:
        return (Sealed, (self._token,))


class _SealedDescriptor:
    """Wraps plain strings assigned to the attribute into :class:`Sealed` values."""

    def __init__(self, field: SealedField) -> None:
        self.field = field

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        if instance is None:
            return self
        return instance.__dict__.get(self.field.attname, Sealed(""))

    def __set__(self, instance: Any, value: Any) -> None:
        instance.__dict__[self.field.attname] = self.field.to_python(value)


class SealedField(models.TextField):
    """A text column holding a Fernet token; the Python value is a :class:`Sealed`.

    Assign a ``str``/``bytes`` to seal it, a :class:`Sealed` to keep it, ``""`` or ``None`` to
    clear it. Querying by value is impossible by design.
    """

    description = "Encrypted secret"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("blank", True)
        kwargs.setdefault("default", "")
        kwargs["editable"] = False
        super().__init__(*args, **kwargs)

    def deconstruct(self) -> tuple[str, str, list[Any], dict[str, Any]]:
        name, path, args, kwargs = super().deconstruct()
        kwargs.pop("editable", None)
        return name, path, args, kwargs

    def contribute_to_class(self, cls: type[models.Model], name: str, **kwargs: Any) -> None:
        super().contribute_to_class(cls, name, **kwargs)
        setattr(cls, self.attname, _SealedDescriptor(self))

    def to_python(self, value: Any) -> Sealed:
        if isinstance(value, Sealed):
            return value
        if value is None or value == "":
            return Sealed("")
        if isinstance(value, str | bytes):
            return Sealed.seal(value)
        raise TypeError(f"cannot seal a {type(value).__name__}")

    def from_db_value(self, value: str | None, expression: Any, connection: Any) -> Sealed:
        return Sealed(value or "")

    def get_prep_value(self, value: Any) -> str:
        return self.to_python(value).token

    def value_to_string(self, obj: models.Model) -> str:
        # Dumps (dumpdata, fixtures) carry the ciphertext, never the plaintext.
        return self.value_from_object(obj).token


def secrets_reencrypt(done_with: Callable[[str, int], None] | None = None) -> dict[str, int]:
    """Re-encrypt every sealed field of every model under the current primary key (after a new key
    was put first in ``CONTROLPLANE_ENCRYPTION_KEYS``); returns rows per model label. One model's
    rows change in one transaction, which also runs ``done_with(label, rows)`` (the caller's
    record of it, kept or lost with the rows); a value no key opens raises
    :class:`SealedSecretError` naming the row, and that model's rows stay as they were (the
    models done before keep theirs)."""
    done: dict[str, int] = {}
    for model in apps.get_models():
        fields = [f.name for f in model._meta.fields if isinstance(f, SealedField)]
        if not fields:
            continue
        count = 0
        with transaction.atomic():
            for obj in model.objects.only("pk", *fields).iterator(chunk_size=500):
                try:
                    for name in fields:
                        setattr(obj, name, getattr(obj, name).rotated())
                except SealedSecretError as exc:
                    raise SealedSecretError(f"{model._meta.label} {obj.pk}: {exc}") from exc
                obj.save(update_fields=fields)
                count += 1
            if done_with is not None:
                done_with(model._meta.label, count)
        done[model._meta.label] = count
    return done
