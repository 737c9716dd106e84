"""The kernel's admin: the pieces every app's admin uses (:mod:`.base`), the audit trail
(:mod:`.trail`), named API tokens (:mod:`.tokens`), and users and groups (:mod:`.users`)."""

from . import tokens, trail, users  # noqa: F401 - registers the model admins
from .base import (
    STATE_COLOURS,
    VERSION_FIELDS,
    AuditedWritesMixin,
    AuditHistoryMixin,
    ReadOnlyAdmin,
    RecordAdmin,
    RefusalsShownMixin,
    ResourceAdmin,
    ResourceVersionForm,
    SecretTextarea,
    WriteOnlySecretField,
    admin_link,
    age,
    object_button,
    secret_state,
    state_badge,
    when,
)

__all__ = [
    "STATE_COLOURS",
    "VERSION_FIELDS",
    "AuditHistoryMixin",
    "AuditedWritesMixin",
    "ReadOnlyAdmin",
    "RecordAdmin",
    "RefusalsShownMixin",
    "ResourceAdmin",
    "ResourceVersionForm",
    "SecretTextarea",
    "WriteOnlySecretField",
    "admin_link",
    "age",
    "object_button",
    "secret_state",
    "state_badge",
    "when",
]
