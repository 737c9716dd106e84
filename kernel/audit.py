"""Who did what: every write through a door, recorded with its actor, source, object and diff.

Many teams write into the control plane: operators in the admin and the API, scripts with API
tokens, module managers with their module's credentials, people with ``manage.py apply``. Like
Kubernetes' audit log, each write (and each refused write, with its reason) becomes an
:class:`~kernel.models.AuditEntry`: the actor (a user's name, or ``module:<name>`` for a module
credential), the credential used (token or module credential name; empty for a session), the
door (``admin``, ``api``, ``command``), the client's address, the object and what changed.

How the actor reaches the services: each door says who is acting, once. The web role's
:class:`AuditMiddleware` remembers the request (DRF authenticates later, inside the view, and
sets ``user`` and ``auth`` on the same request, so the actor is read when a write is recorded);
commands wrap their work in :func:`acting` with :func:`command_actor`. The services record
(:func:`record`, :func:`record_change`) in the transaction of the write, so an entry exists exactly
when the write committed. Work the control plane does by itself (reconciles, beat, workers) has
no actor and is not recorded here: the reconcile records and the timeline tell it.

Secrets never appear: sealed fields (kubeconfigs, keys) and passwords (their hashes) are recorded
only as set, changed or not set, fields a model declares opaque (``AUDIT_OPAQUE``: a
SyncResource's manifests may hold Secret manifests) only by size and digest, and long values are
cut.
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime as dt
import getpass
import hashlib
import json
import logging
import socket
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from django.apps import apps
from django.conf import settings
from django.contrib.auth.hashers import UNUSABLE_PASSWORD_PREFIX
from django.contrib.auth.models import Permission
from django.core.exceptions import ValidationError
from django.core.serializers.json import DjangoJSONEncoder
from django.db import models
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from prometheus_client import Counter

from kernel.errors import ApplicationError
from kernel.models import AuditEntry, IssuedKey
from kernel.sealing import Sealed, SealedField

log = logging.getLogger(__name__)

# Fields that are bookkeeping, not what anyone changed.
UNAUDITED = frozenset(
    {"id", "uid", "resource_version", "generation", "created_at", "updated_at", "digest", "last_used_at"}
)
VALUE_SHOWN = 1000  # characters of a value kept in a diff
REDACTED_SET, REDACTED_UNSET = "<set, redacted>", "<not set>"
REDACTED_CHANGED = "<changed, redacted>"
REDACTED_DISABLED = "<disabled>"  # a password no one can log in with (Django's unusable hash)
# Fields holding a secret in clear or as a hash (a user's password): shown as set, changed or not set.
SECRET_NAMES = frozenset({"password"})
ANONYMOUS = "anonymous"

UNAUTHENTICATED_REFUSALS = Counter(
    "controlplane_unauthenticated_refusals",
    "Writes refused because the client was not authenticated (no key, a wrong key, no session), every one; "
    "the audit trail records at most AUDIT_UNAUTHENTICATED_PER_MINUTE of them a minute.",
    ["door"],
)
UNAUTHENTICATED_UNRECORDED = Counter(
    "controlplane_unauthenticated_refusals_unrecorded",
    "Unauthenticated refused writes left out of the audit trail: its per-minute budget "
    "(AUDIT_UNAUTHENTICATED_PER_MINUTE) was spent.",
    ["door"],
)


@dataclass(frozen=True)
class Actor:
    """Who is acting, through which door and from where."""

    name: str
    credential: str = ""
    via: str = "api"
    source: str = ""
    forwarded_for: str = ""
    request: str = ""


_REQUEST: contextvars.ContextVar[HttpRequest | None] = contextvars.ContextVar("audit_request", default=None)
_ACTOR: contextvars.ContextVar[Actor | None] = contextvars.ContextVar("audit_actor", default=None)


def actor_of_request(request: HttpRequest) -> Actor:
    """The actor of a web request: its user (session or token), the credential it used."""
    user = getattr(request, "user", None)
    auth = getattr(request, "auth", None)  # DRF sets it on the HttpRequest when it authenticates
    name = user.get_username() if user is not None and getattr(user, "is_authenticated", False) else ""
    credential = ""
    if auth is not None and hasattr(auth, "_meta") and hasattr(auth, "name"):
        credential = f"{auth._meta.verbose_name} {auth.name}"
        module = getattr(getattr(auth, "module", None), "name", None)
        if module:
            credential = f"{auth._meta.verbose_name} {module}/{auth.name}"
    elif auth is not None:
        credential = "legacy token"
    path = request.path
    via = "api" if path.startswith("/api/") else "admin" if path.startswith("/admin/") else "web"
    return Actor(
        name=(name or ANONYMOUS)[:150],
        credential=credential[:160],
        via=via,
        source=str(request.META.get("REMOTE_ADDR", ""))[:64],
        forwarded_for=str(request.META.get("HTTP_X_FORWARDED_FOR", ""))[:200],
        request=f"{request.method} {path}"[:200],
    )


def command_actor(command: str) -> Actor:
    """The actor of a management command: the operating-system user on this host."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return Actor(name=user, via="command", source=socket.gethostname()[:64], request=command[:200])


@contextlib.contextmanager
def acting(actor: Actor) -> Iterator[Actor]:
    """Writes inside are recorded as ``actor``'s."""
    token = _ACTOR.set(actor)
    try:
        yield actor
    finally:
        _ACTOR.reset(token)


def current_actor() -> Actor | None:
    actor = _ACTOR.get()
    if actor is not None:
        return actor
    request = _REQUEST.get()
    return actor_of_request(request) if request is not None else None


class AuditMiddleware:
    """Remembers the request being served, so the writes it makes are recorded as its actor's."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        token = _REQUEST.set(request)
        try:
            response = self.get_response(request)
            if (
                response.status_code == 403
                and request.method == "POST"
                and request.path.startswith("/admin/")
            ):
                _record_admin_refusal(request)
            return response
        finally:
            _REQUEST.reset(token)


# An admin URL's name ends with what its view does: ``<app>_<model>_<view>``.
ADMIN_ACTIONS = {
    "add": "create",
    "change": "update",
    "edit": "update",
    "delete": "delete",
    "changelist": "action",
}


def _record_admin_refusal(request: HttpRequest) -> None:
    """A write the admin refused (403: no permission, outside the scope, a failed CSRF check) is
    in the trail like a refused API write: who, which object, which action."""
    match = getattr(request, "resolver_match", None)
    kind = name = namespace = uid = ""
    action = "post"
    if match is not None and match.url_name:
        app_label, _, rest = str(match.url_name).partition("_")
        model_name, _, view = rest.rpartition("_")
        verb = match.kwargs.get("verb")
        action = str(verb) if verb else ADMIN_ACTIONS.get(view, view or "post")
        if action == "action":
            action = str(request.POST.get("action") or "action")
        try:
            model = apps.get_model(app_label, model_name)
        except (LookupError, ValueError):
            model = None
        if model is not None:
            kind = model.__name__
            object_id = match.kwargs.get("object_id")
            obj = None
            if object_id is not None:
                try:
                    obj = model._base_manager.filter(pk=object_id).first()
                except (ValueError, TypeError, ValidationError):
                    obj = None
            if obj is not None:
                kind, namespace, name, uid = identity(obj)
            elif object_id is not None:
                name = str(object_id)
    try:
        record_refusal(
            ApplicationError("permission denied"),
            action=action[:32],
            kind=kind,
            namespace=namespace,
            name=name,
            uid=uid,
            actor=actor_of_request(request),
        )
    except Exception:  # the answer must go out even if the trail cannot take it now
        log.exception("could not record a refused admin write in the audit trail")


# --- values and diffs -----------------------------------------------------------------------------


def _plain(value: Any) -> Any:
    return json.loads(json.dumps(value, cls=DjangoJSONEncoder, default=str))


def _cut(value: Any) -> Any:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    if len(text) <= VALUE_SHOWN:
        return value
    return f"{text[:VALUE_SHOWN]}… ({len(text):,} characters)"


def opaque(text: str) -> str:
    """A value recorded by size and digest only (it may hold secrets)."""
    if not text:
        return ""
    digest = hashlib.sha256(str(text).encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"<{len(str(text)):,} characters, sha256 {digest}…>"


def snapshot(model: type[models.Model], values: Mapping[str, Any]) -> dict[str, Any]:
    """What an audit diff shows of a row (``values`` by attribute name): secrets redacted."""
    hidden = set(getattr(model, "AUDIT_OPAQUE", ()))
    shown: dict[str, Any] = {}
    for field in model._meta.concrete_fields:
        if field.name in UNAUDITED or field.attname not in values:
            continue
        value = values[field.attname]
        if field.name in SECRET_NAMES:
            shown[field.name] = _password_state(value)
        elif isinstance(field, SealedField) or isinstance(value, Sealed):
            shown[field.name] = REDACTED_SET if value else REDACTED_UNSET
        elif field.name in hidden:
            shown[field.name] = opaque(value)
        else:
            shown[field.name] = _cut(_plain(value))
    return shown


def instance_values(obj: models.Model) -> dict[str, Any]:
    return {field.attname: getattr(obj, field.attname) for field in obj._meta.concrete_fields}


def stored_values(obj: models.Model) -> dict[str, Any] | None:
    """The stored row of ``obj`` by attribute name (``None``: not stored yet): a write's ``before``."""
    if obj.pk is None:
        return None
    fields = [field.attname for field in obj._meta.concrete_fields]
    return type(obj)._base_manager.filter(pk=obj.pk).values(*fields).first()


def _related_label(related: models.Model) -> str:
    if isinstance(related, Permission):
        return f"{related.content_type.app_label}.{related.codename}"
    return str(related)


def related_values(obj: models.Model) -> dict[str, list[str]]:
    """What ``obj``'s many-to-many fields hold (a user's groups and permissions), sorted, for a diff."""
    if obj.pk is None:
        return {}
    shown = {}
    for field in obj._meta.many_to_many:
        rows = getattr(obj, field.name).all()
        if field.related_model is Permission:
            rows = rows.select_related("content_type")
        shown[field.name] = sorted(_related_label(row) for row in rows)
    return shown


def identity(obj: models.Model) -> tuple[str, str, str, str]:
    """(kind, namespace, name, uid) an entry names ``obj`` by, and its *History* page finds it by.

    Issued keys are named under their owner (the user, or the module) as namespace; users by
    their username; certificates by their common name; rows without a name by their id."""
    kind = type(obj).__name__
    uid = str(getattr(obj, "uid", "") or "")
    if hasattr(obj, "get_username"):
        return kind, "", obj.get_username(), uid
    name = str(getattr(obj, "name", "") or getattr(obj, "common_name", "") or "")
    if not name and obj.pk is not None:
        name = str(obj.pk)  # a row without a name (a job) by its id
    namespace = str(getattr(obj, "namespace", "") or "")
    if isinstance(obj, IssuedKey):
        owner = getattr(obj, "user", None) or getattr(obj, "module", None)
        named = owner.get_username() if hasattr(owner, "get_username") else getattr(owner, "name", "")
        namespace = str(named or "")
    return kind, namespace, name, uid


def diff(before: Mapping[str, Any] | None, after: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``[{field, before, after}]`` for every field whose shown value differs (a secret's shown
    value does not change with it: :func:`secret_changes` tells those)."""
    before = before or {}
    nothing = (None, "", [], {}, REDACTED_UNSET)
    changes = []
    for name, value in after.items():
        old = before.get(name)
        if old != value and not (old in nothing and value in nothing):
            changes.append({"field": name, "before": old, "after": value})
    return changes


def _password_state(value: Any) -> str:
    if not value:
        return REDACTED_UNSET
    if isinstance(value, str) and value.startswith(UNUSABLE_PASSWORD_PREFIX):
        return REDACTED_DISABLED
    return REDACTED_SET


def secret_changes(
    model: type[models.Model], before: Mapping[str, Any] | None, after: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """A password (hash) of a stored row changed to another usable one, as ``set → changed``: never
    the value. (Set, unset or disabled, the snapshots differ and :func:`diff` says so.)"""
    if before is None:
        return []
    changes = []
    for field in model._meta.concrete_fields:
        if field.name not in SECRET_NAMES or field.attname not in after:
            continue
        old, new = before.get(field.attname), after[field.attname]
        if old != new and _password_state(old) == _password_state(new) == REDACTED_SET:
            changes.append({"field": field.name, "before": REDACTED_SET, "after": REDACTED_CHANGED})
    return changes


# --- recording ----------------------------------------------------------------------------------


def record(
    *,
    action: str,
    kind: str,
    name: str = "",
    namespace: str = "",
    uid: str = "",
    kyma_id: int | None = None,
    changes: Iterable[dict[str, Any]] = (),
    outcome: str = AuditEntry.Outcome.DONE,
    reason: str = "",
    actor: Actor | None = None,
) -> AuditEntry | None:
    """Write one entry as the current actor (``None``, nothing written, when no door is acting)."""
    actor = actor or current_actor()
    if actor is None:
        return None
    return AuditEntry.objects.create(
        actor=actor.name,
        credential=actor.credential,
        via=actor.via,
        source=actor.source,
        forwarded_for=actor.forwarded_for,
        request=actor.request,
        action=action[:32],
        outcome=outcome,
        reason=reason,
        kind=kind[:64],
        namespace=str(namespace)[:63],
        name=str(name)[:253],
        uid=str(uid)[:36],
        kyma_id=kyma_id,
        changes=list(changes),
    )


def kyma_id_of(obj: models.Model) -> int | None:
    """The Kyma an object belongs to (itself for a Kyma), for the Kyma's timeline."""
    if obj._meta.model_name == "kyma":
        return obj.pk
    return getattr(obj, "kyma_id", None)


def record_change(
    obj: models.Model,
    *,
    before: Mapping[str, Any] | None,
    action: str | None = None,
    related_before: Mapping[str, Any] | None = None,
) -> AuditEntry | None:
    """Record a write of ``obj`` (``before``: the stored row by attribute name, ``None`` for a new
    one) if anything shown changed and a door is acting. ``related_before``: what its
    many-to-many fields held (:func:`related_values`), when the write changed those too."""
    if current_actor() is None:
        return None
    model = type(obj)
    after = instance_values(obj)
    changes = diff(snapshot(model, before) if before is not None else None, snapshot(model, after))
    changes += secret_changes(model, before, after)
    if related_before is not None:
        changes += diff(related_before, related_values(obj))
    if before is not None and not changes:
        return None
    return record_object(obj, action=action or ("create" if before is None else "update"), changes=changes)


def record_object(
    obj: models.Model, *, action: str, changes: Iterable[dict[str, Any]] = ()
) -> AuditEntry | None:
    """Record an action on ``obj`` that is not a field diff (delete, revoke, reconcile, ...)."""
    kind, namespace, name, uid = identity(obj)
    return record(
        action=action,
        kind=kind,
        name=name,
        namespace=namespace,
        uid=uid,
        kyma_id=kyma_id_of(obj),
        changes=changes,
    )


def _identity(label: str) -> tuple[str, str, str]:
    """``Kind ns/name`` (a document's label in an apply) as (kind, namespace, name)."""
    kind, _, target = label.partition(" ")
    namespace, _, name = target.rpartition("/")
    return ("" if kind == "?" else kind), namespace, ("" if name == "?" else name)


def record_refusal(
    exc: Exception,
    *,
    action: str,
    kind: str = "",
    namespace: str = "",
    name: str = "",
    uid: str = "",
    actor: Actor | None = None,
) -> None:
    """Record a refused write: one entry, or one per failed document of a multi-document apply.

    Written by the door after the write's transaction rolled back (so it stays)."""
    actor = actor or current_actor()
    if actor is None:
        return
    if actor.name == ANONYMOUS and not unauthenticated_recorded(actor.via):
        return
    failures = getattr(exc, "failures", None)
    if failures:
        for _, label, failure in failures:
            doc_kind, doc_namespace, doc_name = _identity(label)
            record(
                action=action,
                kind=doc_kind,
                namespace=doc_namespace,
                name=doc_name,
                outcome=AuditEntry.Outcome.REFUSED,
                reason=failure.message if isinstance(failure, ApplicationError) else str(failure),
                actor=actor,
            )
        return
    reason = exc.message if isinstance(exc, ApplicationError) else str(getattr(exc, "detail", exc))
    record(
        action=action,
        kind=kind,
        namespace=namespace,
        name=name,
        uid=uid,
        outcome=AuditEntry.Outcome.REFUSED,
        reason=reason,
        actor=actor,
    )


def unauthenticated_recorded(door: str) -> bool:
    """Count an unauthenticated refusal; whether it goes into the trail: at most
    ``AUDIT_UNAUTHENTICATED_PER_MINUTE`` a minute across every process (the trail itself is the
    counter, through its actor index), so nobody without a key can flood it."""
    UNAUTHENTICATED_REFUSALS.labels(door).inc()
    since = timezone.now() - dt.timedelta(minutes=1)
    recent = AuditEntry.objects.filter(actor=ANONYMOUS, at__gte=since).count()
    if recent < settings.AUDIT_UNAUTHENTICATED_PER_MINUTE:
        return True
    UNAUTHENTICATED_UNRECORDED.labels(door).inc()
    return False


def audit_prune(*, older_than: dt.datetime, batch: int = 5000) -> int:
    """Delete entries older than ``older_than``, in batches (short locks); returns how many."""
    deleted = 0
    while True:
        ids = list(AuditEntry.objects.filter(at__lt=older_than).values_list("id", flat=True)[:batch])
        if not ids:
            return deleted
        deleted += AuditEntry.objects.filter(id__in=ids).delete()[0]


def kept_since(days: float) -> dt.datetime:
    return timezone.now() - dt.timedelta(days=days)
