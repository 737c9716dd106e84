"""The observed status of Watchers: has each one's webhook reached every reachable runtime?

A reconcile that applies a runtime's ``skr-webhook`` configuration records on the Kyma
(``applied_watchers``) one rollout mark per Watcher the configuration carries: the Watcher's uid
and a digest of its webhook entry as rendered then. A Watcher is

- ``Ready`` when every reachable runtime carries the mark of its entry as rendered now (its route
  on the listener needs nothing more: the listener routes the component of every stored Watcher);
- ``Processing`` while some reachable runtimes carry an older entry, or none;
- ``Error`` when its entry cannot be rendered (the reconciler leaves such a Watcher out, so one
  bad Watcher never makes every runtime refuse the whole configuration);
- ``Deleting`` once deleted, until no runtime carries it.

A runtime is reachable unless its Kyma is being deleted or its last reconcile could not reach it
(``Runtime`` condition False). The mark holds a digest, not the generation, because labels (the
managed-by label names the component, hence the webhook's path) change the entry too. Everything
comes from the database: the fleet is read in two queries whatever its size, and only Watchers
whose status changed are written.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator

from django.core.exceptions import ValidationError
from django.utils import timezone

from fleet.models import Kyma, KymaState
from kernel.documents.hashing import document_hash
from kernel.documents.schema import DNS_LABEL
from kernel.timefmt import rfc3339

from .models import MANAGED_BY_LABEL, Watcher, WatcherState
from .rendering import webhook

CONDITION = "WebhookRollout"
MARK_SEPARATOR = "/"
MAX_NAME = 253  # a webhook's name is a DNS subdomain
MAX_MESSAGE = 2000
# The fields rendering reads; their validators are the rendering's precondition.
RENDERED_FIELDS = frozenset({"namespace", "name", "component", *Watcher.SPEC_FIELDS})


def _version(watcher: Watcher) -> tuple:
    """What the checks below depend on: the rendered fields as stored (a row written around the
    services keeps its generation, so the values themselves are the key). Every reconcile asks,
    so each worker checks a version once instead of validating every Watcher every time."""
    rendered = {field: getattr(watcher, field) for field in sorted(RENDERED_FIELDS)}
    return (watcher.uid, json.dumps(rendered, sort_keys=True, default=str))


def _once_per_version(check: Callable[[Watcher], str]) -> Callable[[Watcher], str]:
    seen: dict[tuple, str] = {}

    @functools.wraps(check)
    def cached(watcher: Watcher) -> str:
        key = _version(watcher)
        if key not in seen:
            if len(seen) > 1000:
                seen.clear()
            seen[key] = check(watcher)
        return seen[key]

    return cached


@_once_per_version
def webhook_problem(watcher: Watcher) -> str:
    """Why the Watcher's webhook entry cannot be rendered, or ``""`` when it can.

    Rows are validated on save, so this catches rows written around the services (or under
    older rules) and what field validation cannot see, such as the webhook name's length.
    """
    try:
        watcher.clean_fields(exclude=[f.name for f in Watcher._meta.fields if f.name not in RENDERED_FIELDS])
    except ValidationError as exc:
        return "; ".join(
            _located(field, error) for field, errors in exc.message_dict.items() for error in errors
        )
    if not re.fullmatch(DNS_LABEL, watcher.component or ""):
        return (
            f"the component {watcher.component!r} (the webhook's path) is not a DNS label: "
            f"set spec.manager or the label {MANAGED_BY_LABEL}"
        )
    if len(watcher.webhook_name) > MAX_NAME:
        return f"the webhook name {watcher.webhook_name!r} is longer than {MAX_NAME} characters"
    try:
        webhook(watcher, b"")
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        return f"the webhook cannot be rendered: {exc!r}"
    return ""


def _located(field: str, error: str) -> str:
    """``labelsToWatch: ...``; the JSON fields' messages carry their path already."""
    name = re.sub(r"_(\w)", lambda m: m.group(1).upper(), field)
    return error if error.startswith(name) else f"{name}: {error}"


@_once_per_version
def rollout_mark(watcher: Watcher) -> str:
    """What a runtime records for a Watcher whose current webhook entry it carries."""
    entry = webhook(watcher, b"")  # the CA bundle belongs to the runtime, not to the Watcher
    return f"{watcher.uid}{MARK_SEPARATOR}{document_hash(entry)}"


def marked_uid(mark: str) -> str:
    """The Watcher uid of a rollout mark (a bare uid, as older reconciles recorded, too)."""
    return mark.partition(MARK_SEPARATOR)[0]


def _reachable(conditions: list[dict]) -> bool:
    return not any(c.get("type") == "Runtime" and c.get("status") == "False" for c in conditions)


def _reachable_marks() -> Iterator[list[str]]:
    """The rollout marks of every reachable runtime. Only a Kyma in Error can have been found
    unreachable, so only those rows bring their conditions along."""
    kymas = Kyma.objects.filter(deletion_timestamp__isnull=True)
    marks = "runtime_sync__applied_watchers"
    yield from (
        found or [] for found in kymas.exclude(state=KymaState.ERROR).values_list(marks, flat=True).iterator()
    )
    failed = kymas.filter(state=KymaState.ERROR).values_list(marks, "conditions")
    for found, conditions in failed.iterator():
        if _reachable(conditions):
            yield found or []


class _Fleet:
    """How many reachable runtimes there are, and how many carry each mark and each Watcher."""

    def __init__(self, applied: Iterable[list[str]]) -> None:
        self.runtimes = 0
        self.marks: Counter[str] = Counter()
        self.uids: Counter[str] = Counter()
        for marks in applied:
            self.runtimes += 1
            self.marks.update(set(marks))
            self.uids.update({marked_uid(mark) for mark in marks})


def _observed(watcher: Watcher, fleet: _Fleet) -> tuple[str, str, str, str]:
    """State, condition status, reason and message of one Watcher."""
    of = f"of {fleet.runtimes} runtimes"
    if watcher.is_deleting:
        left = fleet.uids[str(watcher.uid)]
        return WatcherState.DELETING, "False", "Deleting", f"webhook still in {left} {of}"
    problem = webhook_problem(watcher)
    if problem:
        message = f"the webhook cannot be rolled out: {problem}"[:MAX_MESSAGE]
        return WatcherState.ERROR, "False", "InvalidConfiguration", message
    carried = fleet.marks[rollout_mark(watcher)]
    message = (
        f"webhook {watcher.webhook_name} in {carried} {of}; "
        f"events of /v2/{watcher.component}/event are routed"
    )
    if carried >= fleet.runtimes:
        return WatcherState.READY, "True", "RolledOut", message
    return WatcherState.PROCESSING, "False", "RollingOut", message


def _write(watcher: Watcher, observed: tuple[str, str, str, str], now: dt.datetime) -> bool:
    """Store the status if it changed; not over a newer spec or a deletion that came meanwhile."""
    state, status, reason, message = observed
    old = next((c for c in watcher.conditions if c.get("type") == CONDITION), None)
    if (
        old is not None
        and (state, watcher.observed_generation) == (watcher.state, watcher.generation)
        and (old.get("status"), old.get("reason"), old.get("message")) == (status, reason, message)
        and old.get("observedGeneration") == watcher.generation
    ):
        return False
    since = old["lastTransitionTime"] if old and old.get("status") == status else None
    condition = {
        "type": CONDITION,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": since or rfc3339(now),
        "observedGeneration": watcher.generation,
    }
    conditions = [*(c for c in watcher.conditions if c.get("type") != CONDITION), condition]
    fields = {"state": str(state), "conditions": conditions, "observed_generation": watcher.generation}
    written = Watcher.objects.filter(
        pk=watcher.pk, generation=watcher.generation, deletion_timestamp__isnull=not watcher.is_deleting
    ).update(**fields)
    if written:
        for name, value in fields.items():
            setattr(watcher, name, value)
    return bool(written)


def watchers_status_refresh(
    *, watchers: Iterable[Watcher] | None = None, now: dt.datetime | None = None
) -> int:
    """Compute and store the status of ``watchers`` (default: all); returns how many changed.

    Two queries read the fleet, one reads the Watchers (unless given) and one writes each changed
    Watcher: the number of queries does not grow with the number of runtimes.
    """
    fleet = _Fleet(_reachable_marks())
    now = now or timezone.now()
    chosen = Watcher.objects.all() if watchers is None else watchers
    return sum(_write(watcher, _observed(watcher, fleet), now) for watcher in chosen)
