"""Accepting a WatchEvent: who sent it, which Kyma it concerns, where it goes.

Routing follows upstream's per-Watcher VirtualService: the path's component is a Watcher's
manager. Events for ``LISTENER_RECONCILE_COMPONENT`` (lifecycle-manager) ask for a reconcile of the
Kyma (coalesced); events for any other component are forwarded to that Watcher's ``serviceInfo``
by a worker, with retries. The answer is 200 only once the reconcile or forward is in the broker.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

from django.conf import settings
from django.db import IntegrityError
from django.utils import timezone

from fleet import queue
from fleet.models import Kyma, WatcherContact
from fleet.selectors import watcher_silent_after
from kernel.errors import ApplicationError, NotFound
from watchers.models import Watcher

from .cache import REFRESHER, TTLCache
from .conf import HOT
from .events import WatchEvent
from .identity import ClientIdentity
from .models import EventOutcome
from .recorder import RECORDER
from .tasks import forward_event_publish


class Forbidden(ApplicationError):
    """A valid certificate that may not speak for this runtime (403)."""

    status_code = 403
    code = "forbidden"


@dataclass(frozen=True)
class KymaRef:
    id: int
    namespace: str
    name: str
    runtime_id: str
    skr_domain: str


@dataclass(frozen=True)
class Route:
    component: str
    service_info: dict


_FIELDS = ("id", "namespace", "name", "runtime_id", "skr_domain")


def _kymas_by_runtime(runtime_ids: Sequence[str]) -> dict[str, KymaRef]:
    """The Kymas of these runtimes (ids are unique), in one query."""
    rows = Kyma.objects.filter(runtime_id__in=runtime_ids).order_by().values_list(*_FIELDS)
    return {row[3]: KymaRef(*row) for row in rows}


def _kymas_by_name(keys: Sequence[tuple[str, str]]) -> dict[tuple[str, str], KymaRef]:
    """The Kymas of these (namespace, name) pairs, in one query (it may read a few more)."""
    wanted = set(keys)
    rows = Kyma.objects.filter(namespace__in={ns for ns, _ in keys}, name__in={name for _, name in keys})
    found = (KymaRef(*row) for row in rows.order_by().values_list(*_FIELDS))
    return {(ref.namespace, ref.name): ref for ref in found if (ref.namespace, ref.name) in wanted}


def _routes(components: Sequence[str]) -> dict[str, Route]:
    """The routes of these components (unique per Watcher), in one query."""
    rows = Watcher.objects.filter(component__in=components).order_by()
    return {
        component: Route(component, info) for component, info in rows.values_list("component", "service_info")
    }


KYMAS_BY_RUNTIME: TTLCache[str, KymaRef] = REFRESHER.add(
    TTLCache(lambda runtime_id: _kymas_by_runtime([runtime_id]).get(runtime_id), _kymas_by_runtime)
)
KYMAS_BY_NAME: TTLCache[tuple[str, str], KymaRef] = REFRESHER.add(
    TTLCache(lambda key: _kymas_by_name([key]).get(key), _kymas_by_name)
)
ROUTES: TTLCache[str, Route] = REFRESHER.add(
    TTLCache(lambda component: _routes([component]).get(component), _routes)
)


COVERAGE = queue.Coverage()


def runtime_for(event_owner: tuple[str, str] | None, identity: ClientIdentity) -> KymaRef:
    """The Kyma the sender may speak for, or :class:`Forbidden`.

    v2 identifies the runtime by the certificate's CN. v1 names the owner Kyma in the body and
    the certificate must carry that Kyma's SKR domain as SAN (SAN pinning); v2 checks the SAN too
    when ``LISTENER_SAN_PINNING`` is on, so a certificate for one runtime never triggers another.
    """
    if event_owner is None:
        kyma = KYMAS_BY_RUNTIME.get(identity.common_name)
        if kyma is None:
            raise Forbidden(f"no runtime with id {identity.common_name!r} (the certificate's CN)")
        pin = HOT.LISTENER_SAN_PINNING
    else:
        kyma = KYMAS_BY_NAME.get(event_owner)
        if kyma is None:
            raise Forbidden(f"owner Kyma {event_owner[0]}/{event_owner[1]} is not known")
        pin = True
    if pin and not identity.has_san(kyma.skr_domain):
        if not kyma.skr_domain:
            raise Forbidden(f"runtime {kyma.runtime_id} has no skr-domain to pin its certificate to")
        raise Forbidden(
            f"the certificate is not valid for runtime {kyma.runtime_id}: "
            f"it lacks the SAN {kyma.skr_domain!r}"
        )
    return kyma


def route_for(component: str) -> Route:
    route = ROUTES.get(component)
    if route is None and component == settings.LISTENER_RECONCILE_COMPONENT:
        # The module-CR webhook every runtime gets reports here, with or without a Kyma Watcher.
        return Route(component, {})
    if route is None:
        raise NotFound(f"no Watcher for component {component!r}")
    return route


@dataclass(frozen=True)
class Accepted:
    kyma: KymaRef
    outcome: str

    def body(self) -> dict[str, str]:
        return {
            "status": "accepted",
            "kyma": f"{self.kyma.namespace}/{self.kyma.name}",
            "outcome": str(self.outcome),
        }

    def payload(self) -> bytes:
        """:meth:`body` as the answer's bytes (a few shapes per Kyma: each encoded once)."""
        return _accepted_payload(self.kyma.namespace, self.kyma.name, str(self.outcome))


@functools.lru_cache(maxsize=4096)
def _accepted_payload(namespace: str, name: str, outcome: str) -> bytes:
    body = {"status": "accepted", "kyma": f"{namespace}/{name}", "outcome": outcome}
    return json.dumps(body, separators=(",", ":")).encode()


# Names, namespaces, groups and kinds as Kubernetes spells them (the reconcile puts them in a path).
K8S_TOKEN = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9.]{0,251}[A-Za-z0-9])?$|^$")


@functools.lru_cache(maxsize=4096)
def _storable_names(*parts: str) -> bool:
    """Whether each part is spelled as Kubernetes spells names, namespaces, groups and kinds; a
    runtime's events name the same few objects, so each spelling is checked once."""
    return all(K8S_TOKEN.match(part) for part in parts)


def stored_change(event: WatchEvent) -> queue.StoredChange | None:
    """The change the event reported, as the reconcile checks it in the runtime (``None``: the
    event did not say; the reconcile then starts after ``LISTENER_RECONCILE_DELAY``)."""
    change = event.change
    if change is None or not _storable_names(
        event.watched.namespace, event.watched.name, event.group, event.kind
    ):
        return None  # not a name the runtime could have stored: nothing to check, keep the delay
    api_version = f"{event.group}/{event.version}" if event.group else event.version
    return queue.StoredChange(
        api_version=api_version,
        kind=event.kind,
        namespace=event.watched.namespace,
        name=event.watched.name,
        operation=change.operation,
        uid=change.uid,
        old_resource_version=change.old_resource_version,
    )


def watch_event_accept(
    *, event: WatchEvent, identity: ClientIdentity, route: Route | None = None
) -> Accepted:
    """Route an accepted event; raises NotFound (404), Forbidden (403), QueueUnavailable (503).
    ``route``: the event's component's, when the caller looked it up already."""
    # Before the claim: a reconcile covering this event starts later. (timezone.now(), without
    # its settings.USE_TZ look-up: the project always uses aware times.)
    received_at = dt.datetime.now(dt.UTC)
    route = route or route_for(event.component)
    owner = (event.owner.namespace, event.owner.name) if event.owner else None
    kyma = runtime_for(owner, identity)
    if event.component == HOT.LISTENER_RECONCILE_COMPONENT:
        queued = COVERAGE.request(kyma.id, stored_change(event))
        outcome = EventOutcome.QUEUED if queued else EventOutcome.COALESCED
    else:
        forward_event_publish(route=route, event=event, kyma=kyma, identity=identity)
        outcome = EventOutcome.FORWARDED
    RECORDER.add(kyma.id, event, outcome, received_at)
    return Accepted(kyma, outcome)


def heartbeat_accept(*, identity: ClientIdentity, report: dict) -> KymaRef:
    """A runtime watcher says it is alive; its Kyma's ``WatcherContact.last_seen_at`` moves (at most
    every few seconds, so heartbeats stay cheap). The first heartbeat of a watcher that was silent
    (or never heard) queues a reconcile: it clears the ``WatcherHeartbeat`` condition at once."""
    kyma = runtime_for(None, identity)
    now = timezone.now()
    # The Kyma's WatcherContact row (the listener is its only writer; never the Kyma row, so a
    # heartbeat never waits on an operator's edit): read, then written when due.
    seen = WatcherContact.objects.filter(kyma_id=kyma.id).values_list("last_seen_at", flat=True).first()
    if seen is not None and seen > now - _HEARTBEAT_WRITE_EVERY:
        return kyma
    try:
        WatcherContact.objects.bulk_create(
            [WatcherContact(kyma_id=kyma.id, last_seen_at=now, report=report)],
            update_conflicts=True,
            unique_fields=["kyma"],
            update_fields=["last_seen_at", "report"],
        )
    except IntegrityError:  # the Kyma was deleted a moment ago (the identity cache still knew it)
        return kyma
    window = watcher_silent_after()
    if window and (seen is None or seen < now - window):
        queue.request_one(kyma.id, countdown=0)
    return kyma


_HEARTBEAT_WRITE_EVERY = dt.timedelta(seconds=5)
