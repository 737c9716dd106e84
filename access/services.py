"""Writes of the access app: role bindings, identities from the provider, service accounts,
sessions. Each write through a door is in the audit trail (:mod:`kernel.audit`)."""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.sessions.backends.base import SessionBase
from django.db import transaction
from django.utils import timezone
from django.utils.module_loading import import_string

from kernel import audit
from kernel.errors import ValidationFailed
from kernel.services import deletion_begin, resource_save, stored_spec, upsert

from . import metrics
from .models import FleetRoleBinding, Identity, OpenSession
from .scope import bindings_of

log = logging.getLogger(__name__)

BREAK_GLASS = "BREAK-GLASS"


# --- role bindings ----------------------------------------------------------------------------


@transaction.atomic
def binding_save(binding: FleetRoleBinding) -> bool:
    """Validate and store ``binding`` (recorded with what changed). Returns whether its spec changed."""
    binding.groups = sorted(set(binding.groups or ()))
    binding.users = sorted(set(binding.users or ()))
    return resource_save(binding, before=stored_spec(binding))


def binding_apply(
    *,
    name: str,
    role: str,
    groups: Iterable[str] = (),
    users: Iterable[str] = (),
    selector: Mapping[str, Any] | None = None,
    description: str = "",
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
) -> tuple[FleetRoleBinding, bool]:
    """Create or update the binding called ``name`` (``manage.py apply``, the API)."""
    return upsert(
        FleetRoleBinding,
        {"name": name},
        {
            "role": role,
            "groups": list(groups),
            "users": list(users),
            "selector": dict(selector or {}),
            "description": description,
            "labels": dict(labels or {}),
            "annotations": dict(annotations or {}),
        },
        binding_save,
    )


@transaction.atomic
def binding_delete(binding: FleetRoleBinding) -> bool:
    """Delete ``binding`` (recorded): its members lose what it gave them at their next request."""
    return deletion_begin(binding)


# --- identities -------------------------------------------------------------------------------


def _free_username(wanted: str, subject: str) -> str:
    user_model = get_user_model()
    name = (wanted or subject)[:150]
    if not user_model.objects.filter(username=name).exists():
        return name
    suffix = "-" + hashlib.sha256(subject.encode()).hexdigest()[:8]
    return name[: 150 - len(suffix)] + suffix


@transaction.atomic
def identity_login(*, issuer: str, claims: Mapping[str, Any], groups_claim: str) -> AbstractBaseUser:
    """The user of a person the provider vouched for (``claims``: verified ID token and
    userinfo), made on its first login; its groups are the provider's, as of now. A user name
    already held by a local account is never taken over: the person gets a suffixed one."""
    subject = str(claims.get("sub") or "")
    if not subject:
        raise ValidationFailed("the provider's answer has no sub claim")
    raw_groups = claims.get(groups_claim) or []
    groups = (
        sorted({str(g) for g in raw_groups if isinstance(g, str | int)})
        if isinstance(raw_groups, list)
        else []
    )
    identity = (
        Identity.objects.select_for_update()
        .select_related("user")
        .filter(issuer=issuer, subject=subject)
        .first()
    )
    user_model = get_user_model()
    if identity is None:
        wanted = str(claims.get("preferred_username") or claims.get("email") or subject)
        user = user_model(username=_free_username(wanted, subject))
        user.set_unusable_password()
        user.save()
        identity = Identity(user=user, origin=Identity.Origin.OIDC, issuer=issuer, subject=subject)
    user = identity.user
    before_groups = list(identity.groups or [])
    identity.groups, identity.groups_at = groups, timezone.now()
    identity.save()
    before = audit.stored_values(user)
    user.email = str(claims.get("email") or "")[:254]
    user.first_name = str(claims.get("given_name") or "")[:150]
    user.last_name = str(claims.get("family_name") or "")[:150]
    user.__dict__.pop("_access_bindings", None)  # the groups just changed
    user.is_staff = bool(bindings_of(user))
    user.save()
    audit.record_change(user, before=before)
    if before_groups != groups:
        audit.record_object(
            user, action="groups", changes=[{"field": "groups", "before": before_groups, "after": groups}]
        )
    return user


@transaction.atomic
def service_account_create(*, name: str, description: str = "") -> AbstractBaseUser:
    """A user for automation (no password, no login page): bind it by its user name and give it
    API tokens; the tokens act with its bindings' rights."""
    user_model = get_user_model()
    username = f"sa-{name}"
    if user_model.objects.filter(username=username).exists():
        raise ValidationFailed(f"a user {username!r} exists already", errors=[("name", "taken")])
    user = user_model(username=username, is_staff=False)
    user.set_unusable_password()
    user.full_clean(exclude=["password"])
    user.save()
    Identity.objects.create(user=user, origin=Identity.Origin.SERVICE_ACCOUNT, description=description)
    audit.record_change(user, before=None)
    return user


# --- logins and sessions ----------------------------------------------------------------------


def login_recorded(*, user: AbstractBaseUser, via: str, session: SessionBase | None) -> None:
    """A login: its session is remembered (a logout ends them all); a local password's login
    while single sign-on is on is a break-glass login, loud in the log and the trail."""
    if session is not None and session.session_key:
        OpenSession.objects.get_or_create(
            session_key=session.session_key, defaults={"user": user, "via": via}
        )
    metrics.LOGINS.labels(via).inc()
    if via == "break-glass":
        log.warning(
            "%s: local password login of %s while single sign-on is on", BREAK_GLASS, user.get_username()
        )
        audit.record_object(
            user,
            action="login",
            changes=[{"field": "login", "before": None, "after": f"{BREAK_GLASS}: local password"}],
        )
    elif via == "oidc":
        audit.record_object(
            user, action="login", changes=[{"field": "login", "before": None, "after": "single sign-on"}]
        )


def sessions_end(*, user: AbstractBaseUser) -> int:
    """End every session ``user`` holds (a logout anywhere ends them all). Returns how many."""
    store: type[SessionBase] = import_string(settings.SESSION_ENGINE).SessionStore
    keys = list(OpenSession.objects.filter(user=user).values_list("session_key", flat=True))
    for key in keys:
        store(session_key=key).delete()
    OpenSession.objects.filter(user=user).delete()
    return len(keys)


def sessions_forget_expired(*, older_than: dt.datetime) -> int:
    """Drop the records of sessions that expired on their own (housekeeping)."""
    return OpenSession.objects.filter(created_at__lt=older_than).delete()[0]
