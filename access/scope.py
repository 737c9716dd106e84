"""The one evaluation of "which Kymas may this user see or change", every door calls it.

A scope is the union of label selectors (``Scope.selectors``) or the whole fleet
(``Scope.everything``). :func:`scope_of` reads it from the user's bindings once per request
(cached on the user object); :func:`scoped` narrows a queryset of any model that belongs to a
Kyma, by the declaration :data:`SCOPED` (model → the path to its Kyma); :func:`require` refuses
one object outside the scope with a 403 that says why; :func:`covers_labels` tells whether a
Kyma with these labels would be inside (a create, an edit of labels, a rollout's runtimes).

Who is scoped: a person or service account with at least one role binding. Superusers, and
local users without a binding (the break-glass administrator, accounts from before single
sign-on), keep what their Django permissions give across the whole fleet; module credentials
have their own rules (their module's objects only) and pass here unchanged.
"""

from __future__ import annotations

import functools
import operator
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.models import Exists, Model, OuterRef, Q, QuerySet

from fleet.models import Kyma, RolloutTarget
from kernel.documents.selectors import describe, selects
from kernel.errors import ApplicationError

from .models import FleetRoleBinding, Identity
from .roles import AUDIT, GRANTS, VIEW

# Every model that belongs to a Kyma, by label, and the path from it to its Kyma ("" for the Kyma
# itself; "kyma_id" for rows that keep only the id). tests/access check that every model with a
# foreign key to the Kyma is here, and that every admin of these models is scoped.
SCOPED: dict[str, str] = {
    "controlplane.kyma": "",
    "controlplane.moduleconfig": "kyma",
    "controlplane.syncresource": "kyma",
    "controlplane.reconcilerecord": "kyma",
    "controlplane.rollouttarget": "kyma",
    "listener.watcheventrecord": "kyma",
    "pki.certificate": "kyma",
    "kernel.auditentry": "kyma_id",
    "controlplane.rollout": "targets",  # seen when one of its runtimes is; acted on when all are
    # The rows beside the Kyma (fleet.models.bookkeeping): the machinery's, shown only on the Kyma
    "controlplane.reconcilestate": "kyma",
    "controlplane.reconcilemark": "kyma",
    "controlplane.watchercontact": "kyma",
    "controlplane.runtimesync": "kyma",
    "controlplane.watchersettingspin": "kyma",
}


# What reading a declared model needs, where it is not "view": the trail is for auditors.
READ_AS: dict[str, str] = {"kernel.auditentry": AUDIT}


class OutOfScope(ApplicationError):
    """A request for a Kyma (or a row of one) outside the user's scope."""

    status_code = 403
    code = "permission_denied"


@dataclass(frozen=True)
class Scope:
    """Every Kyma (``everything``), or those at least one of ``selectors`` selects (none: none)."""

    everything: bool
    selectors: tuple[Mapping[str, Any], ...] = ()

    def covers_labels(self, labels: Mapping[str, str] | None) -> bool:
        return self.everything or any(selects(selector, labels) for selector in self.selectors)

    def kyma_q(self, prefix: str = "") -> Q | None:
        """The Kymas in scope as a filter on ``prefix`` + ``labels`` (``None``: no filter)."""
        if self.everything:
            return None
        if not self.selectors:
            return Q(pk__in=[])
        return functools.reduce(operator.or_, (_selector_q(s, prefix) for s in self.selectors))

    def describe(self) -> str:
        if self.everything:
            return "every runtime"
        if not self.selectors:
            return "no runtime"
        return " or ".join(describe(s) for s in self.selectors)


EVERYTHING = Scope(everything=True)
NOTHING = Scope(everything=False)


def _selector_q(selector: Mapping[str, Any], prefix: str) -> Q:
    """A label selector as a filter (Kubernetes' rules, as :func:`kernel.documents.selectors.selects`)."""
    field = f"{prefix}labels"
    q = Q()
    for key, value in (selector.get("matchLabels") or {}).items():
        q &= Q(**{f"{field}__{key}": value})
    for expression in selector.get("matchExpressions") or ():
        key, op, values = expression["key"], expression["operator"], list(expression.get("values") or ())
        has = Q(**{f"{field}__has_key": key})
        if op == "In":
            q &= Q(**{f"{field}__{key}__in": values})
        elif op == "NotIn":
            q &= ~has | ~Q(**{f"{field}__{key}__in": values})
        elif op == "Exists":
            q &= has
        elif op == "DoesNotExist":
            q &= ~has
    return q


# --- whose bindings ---------------------------------------------------------------------------


def _is_person(user: Any) -> bool:
    return bool(getattr(user, "is_authenticated", False)) and isinstance(user, Model)


def groups_of(user: Any) -> list[str]:
    identity = Identity.objects.filter(user_id=user.pk).only("groups").first()
    return list(identity.groups) if identity is not None and isinstance(identity.groups, list) else []


def bindings_of(user: Any) -> list[FleetRoleBinding]:
    """The bindings that name ``user`` or one of its provider groups (cached on the user)."""
    cached = getattr(user, "_access_bindings", None)
    if cached is not None:
        return cached
    found: list[FleetRoleBinding] = []
    if _is_person(user):
        groups = set(groups_of(user))
        name = user.get_username()
        for binding in FleetRoleBinding.objects.filter(deletion_timestamp__isnull=True).only(
            "role", "groups", "users", "selector", "name"
        ):
            if name in (binding.users or ()) or groups.intersection(binding.groups or ()):
                found.append(binding)
    user._access_bindings = found
    return found


def is_scoped(user: Any) -> bool:
    """Whether bindings decide what ``user`` may (else its Django permissions, fleet-wide)."""
    return _is_person(user) and not user.is_superuser and bool(bindings_of(user))


def scope_of(user: Any, capability: str = VIEW) -> Scope:
    """The Kymas ``user`` may reach with ``capability`` (:mod:`access.roles`)."""
    if not getattr(user, "is_authenticated", False):
        return NOTHING
    if not is_scoped(user):
        return EVERYTHING  # superusers, local users without bindings, module credentials
    selectors = []
    for binding in bindings_of(user):
        if capability not in GRANTS.get(binding.role, ()):
            continue
        if not binding.selector:
            return EVERYTHING
        selectors.append(binding.selector)
    return Scope(everything=False, selectors=tuple(selectors))


def capabilities_of(user: Any) -> set[str]:
    found: set[str] = set()
    for binding in bindings_of(user):
        found |= GRANTS.get(binding.role, frozenset())
    return found


# --- doors ------------------------------------------------------------------------------------


def declared_path(model: type[Model]) -> str | None:
    return SCOPED.get(model._meta.label_lower)


def scoped(user: Any, queryset: QuerySet, capability: str = VIEW) -> QuerySet:
    """``queryset`` narrowed to the rows of Kymas in ``user``'s scope (unchanged for a model that
    belongs to no Kyma, or a user whose scope is everything)."""
    path = declared_path(queryset.model)
    if path is None:
        return queryset
    if capability == VIEW:
        capability = READ_AS.get(queryset.model._meta.label_lower, VIEW)
    scope = scope_of(user, capability)
    if scope.everything:
        return queryset
    return queryset.filter(scope_q(queryset.model, scope))


def scope_q(model: type[Model], scope: Scope) -> Q:
    """The filter that keeps ``model``'s rows of Kymas in ``scope``."""
    from_model = declared_path(model)
    kymas = scope.kyma_q()
    if from_model == "":
        return kymas if kymas is not None else Q()
    in_scope = Kyma.objects.filter(kymas) if kymas is not None else Kyma.objects.all()
    if from_model == "kyma_id":
        # Rows that name no Kyma (the catalog, users, tokens) are for those who see everything.
        return Q(kyma_id__in=in_scope.values("pk"))
    if from_model == "targets":
        return Q(Exists(RolloutTarget.objects.filter(rollout=OuterRef("pk"), kyma__in=in_scope)))
    return Q(**{f"{from_model}__in": in_scope})


def kyma_of(obj: Model) -> Model | None:
    """The Kyma ``obj`` belongs to (itself for a Kyma; ``None``: it belongs to none)."""
    path = declared_path(type(obj))
    if path == "":
        return obj
    if path in (None, "targets"):
        return None
    if path == "kyma_id":
        kyma_id = getattr(obj, "kyma_id", None)
        return Kyma.objects.filter(pk=kyma_id).first() if kyma_id else None
    return getattr(obj, path, None)


def covers(user: Any, obj: Model, capability: str) -> bool:
    """Whether ``obj`` (a Kyma, a row of one, a rollout) is inside ``user``'s scope for ``capability``."""
    scope = scope_of(user, capability)
    if scope.everything:
        return True
    path = declared_path(type(obj))
    if path is None:
        return True
    if path == "targets":
        return rollout_covered(user, obj, capability)
    kyma = kyma_of(obj)
    return kyma is not None and scope.covers_labels(kyma.labels)


def rollout_covered(user: Any, rollout: Model, capability: str) -> bool:
    """Whether every runtime ``rollout`` can reach is in the scope: the runtimes it names, and
    (while it holds its subject) any runtime that may still come under it, so a scoped user
    never acts on a rollout that reaches past its scope."""
    scope = scope_of(user, capability)
    if scope.everything:
        return True
    if getattr(rollout, "kind", "") != "KymaSpec":
        return False  # a catalog or Watcher rollout reaches every runtime that uses its subject
    outside = RolloutTarget.objects.filter(rollout=rollout).exclude(
        kyma__in=scoped(user, Kyma.objects.all(), capability)
    )
    return not outside.exists() and RolloutTarget.objects.filter(rollout=rollout).exists()


def require(user: Any, obj: Model, capability: str, *, what: str = "") -> None:
    """Refuse (403, :class:`OutOfScope`) ``obj`` outside ``user``'s scope for ``capability``."""
    if covers(user, obj, capability):
        return
    name = what or f"{type(obj).__name__} {getattr(obj, 'key', obj)}"
    raise OutOfScope(
        f"{name} is outside your scope for {capability} ({scope_of(user, capability).describe()})"
    )


def require_labels(user: Any, labels: Mapping[str, str] | None, capability: str, *, what: str) -> None:
    """Refuse a Kyma that would have ``labels`` (a create, an edit) outside the scope."""
    scope = scope_of(user, capability)
    if not scope.covers_labels(labels):
        raise OutOfScope(
            f"{what} with labels {dict(labels or {})} would be outside your scope for {capability} "
            f"({scope.describe()})"
        )


def require_all(user: Any, kymas: Iterable[Model], capability: str, *, what: str) -> None:
    scope = scope_of(user, capability)
    if scope.everything:
        return
    outside = [f"{k.namespace}/{k.name}" for k in kymas if not scope.covers_labels(k.labels)]
    if outside:
        shown = ", ".join(outside[:5]) + (f" and {len(outside) - 5} more" if len(outside) > 5 else "")
        raise OutOfScope(f"{what} reaches runtimes outside your scope for {capability}: {shown}")


class WatchScope:
    """Whether a ModuleConfig document of a watch belongs to a Kyma in the user's scope.

    The Kymas in scope are read when the watch opens and again once per bookmark interval (a Kyma
    whose labels moved it in or out counts from then on); the watch holds no database connection
    in between."""

    KYMA_LABEL = "operator.kyma-project.io/kyma-name"

    def __init__(self, user: Any, capability: str = VIEW) -> None:
        self.user, self.capability = user, capability
        self.read_at = 0.0
        self.keys: frozenset[tuple[str, str]] = frozenset()
        self._read()

    def _read(self) -> None:
        try:
            rows = scoped(self.user, Kyma.objects.all(), self.capability).values_list("namespace", "name")
            self.keys = frozenset(rows)
        finally:
            connection.close()
        self.read_at = time.monotonic()

    def __call__(self, document: dict[str, Any]) -> bool:
        if time.monotonic() - self.read_at >= settings.MODULECONFIG_WATCH_BOOKMARK_INTERVAL:
            self._read()
        metadata = document.get("metadata") or {}
        kyma = (metadata.get("labels") or {}).get(self.KYMA_LABEL)
        return (metadata.get("namespace"), kyma) in self.keys
