"""Module managers' credentials: issue (key shown once), edit, revoke, delete, authenticate."""

from __future__ import annotations

import datetime as dt

from django.contrib.auth.base_user import AbstractBaseUser

from fleet.models import MODULE_KEY_MARKER, Module, ModuleCredential
from kernel.api_tokens import key_authenticate, key_delete, key_issue, key_revoke, key_save


def module_credential_create(
    *,
    module: Module,
    name: str,
    expires_at: dt.datetime | None = None,
    created_by: AbstractBaseUser | None = None,
) -> tuple[ModuleCredential, str]:
    """A new credential of ``module``'s manager; returns it with its clear key (shown once)."""
    credential = ModuleCredential(module=module, name=name, expires_at=expires_at, created_by=created_by)
    return credential, module_credential_issue(credential)


def module_credential_issue(credential: ModuleCredential) -> str:
    """Give the unsaved ``credential`` (module, name, expiry set, e.g. by the admin's form) its
    key, validate and save it; returns the clear key (the only time anyone sees it)."""
    return key_issue(credential, marker=MODULE_KEY_MARKER)


def module_credential_save(*, credential: ModuleCredential) -> None:
    """Store an edit of ``credential`` (name, expiry), validated and recorded in the audit trail."""
    key_save(credential)


def module_credential_delete(*, credential: ModuleCredential) -> None:
    """Delete ``credential``'s row (revoking keeps it; prefer that), recorded in the audit trail."""
    key_delete(credential)


def module_credential_revoke(*, credential: ModuleCredential) -> bool:
    """Stop the credential for good (the row stays, saying when). False if it already was."""
    return key_revoke(credential)


def module_credential_authenticate(key: str) -> ModuleCredential | None:
    """The credential whose key is ``key`` with its module, or ``None``; raises ``KeyRefused``
    (revoked, expired) with the reason."""
    return key_authenticate(ModuleCredential.objects.select_related("module"), key)
