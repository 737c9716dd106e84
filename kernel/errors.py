"""One tree of application errors; the API, commands and admin map them to clean answers."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.core.exceptions import NON_FIELD_ERRORS
from django.core.exceptions import ValidationError as DjangoValidationError


class ApplicationError(Exception):
    """A failure the caller can understand and act on (never a bug)."""

    status_code = 400
    code = "invalid"

    def __init__(self, message: str, *, errors: Iterable[tuple[str, str]] = ()) -> None:
        super().__init__(message)
        self.message = message
        self.errors: list[tuple[str, str]] = list(errors)


class ValidationFailed(ApplicationError):
    """Input broke a rule; ``errors`` holds ``(field, reason)`` pairs."""

    code = "invalid"

    @classmethod
    def from_django(cls, exc: DjangoValidationError) -> ValidationFailed:
        """Errors keyed by model field name (``""`` for object-level rules)."""
        errors: list[tuple[str, str]] = []
        if hasattr(exc, "error_dict"):
            for field, messages in exc.message_dict.items():
                errors.extend(("" if field == NON_FIELD_ERRORS else field, message) for message in messages)
        else:
            errors.extend(("", message) for message in exc.messages)
        return cls(summarize(errors), errors=errors)

    def remap(self, paths: dict[str, str]) -> ValidationFailed:
        """The same errors with model field names replaced by document paths.

        Messages from JSON-column validators start with their own sub-path (``modules[1].name:
        ...``); that sub-path is joined to the column's document path (``spec.modules``).
        """
        errors = []
        for field, reason in self.errors:
            path = paths.get(field, field)
            label = path.rsplit(".", 1)[-1]
            head, sep, rest = reason.partition(": ")
            if sep and label and (head == label or head.startswith((label + "[", label + "."))):
                errors.append((path[: len(path) - len(label)] + head, rest))
            else:
                errors.append((path, reason))
        return ValidationFailed(summarize(errors), errors=errors)


def summarize(errors: list[tuple[str, str]]) -> str:
    if not errors:
        return "invalid input"
    field, reason = errors[0]
    first = f"{field}: {reason}" if field else reason
    more = len(errors) - 1
    return first + (f" (and {more} more problem{'s' if more > 1 else ''})" if more else "")


class NotFound(ApplicationError):
    status_code = 404
    code = "not_found"


class Conflict(ApplicationError):
    status_code = 409
    code = "conflict"


class QueueUnavailable(ApplicationError):
    """The broker did not take the message; nothing was enqueued (the caller may retry)."""

    status_code = 503
    code = "queue_unavailable"


def _text(value: object) -> str:
    """``value`` as text any answer can carry: a lone surrogate (not Unicode, so not encodable as
    UTF-8) that a message quotes from the input is written as its escape."""
    text = str(value)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def error_body(detail: str, errors: Iterable[tuple[str, str]] = ()) -> dict[str, Any]:
    """The JSON error shape of every API and of the listener: ``{"detail", "errors": [...]}``.
    It always renders: whatever a message quotes from the input is encodable."""
    return {
        "detail": _text(detail),
        "errors": [{"field": _text(field), "reason": _text(reason)} for field, reason in errors],
    }
