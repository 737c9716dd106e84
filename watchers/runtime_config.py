"""The runtime watcher's image and settings each runtime gets, and a rollout when they change.

Every control-plane process reads ``WATCHER_IMAGE``, ``WATCHER_KCP_ADDR``, ... from its own
environment, and during a deployment old and new processes run side by side. So no process renders
its own settings into a runtime: a runtime gets the settings its Kyma names
(the Kyma's ``WatcherSettingsPin``, a :class:`RuntimeWatcherSettings` digest), which every process renders
alike. The first process that meets settings never seen before (a new image, say) records them and
starts a rollout from the fleet's settings to them (``fleet.rollouts``: waves, gates); its waves
move each runtime's digest, and the new settings become the fleet's once it completes. Settings
seen before are not rolled out again by a process that still has them (an old process of a
deployment in progress); going back is a rollback (or a rollout made by hand).

A Kyma that names none yet (new, or from before this) is given the fleet's settings (the old ones
while a rollout of new ones is under way) by its next reconcile. Settings rows never change, so a
process keeps the ones it has read: a reconcile reads none in the steady state.
"""

from __future__ import annotations

import logging
import threading

from django.db import IntegrityError, transaction

from fleet import queue
from fleet.models import Kyma, Rollout, RolloutKind, RuntimeWatcherSettings
from fleet.models.bookkeeping import row_or_default
from fleet.models.rollout import HOLDING_STATES, effective_policy
from fleet.rollouts.planning import Member
from fleet.rollouts.services import Change, rollout_start
from fleet.services.watcher_pins import watcher_settings_pin, watcher_settings_pin_first

from .rendering import WatcherConfig

log = logging.getLogger(__name__)
SUBJECT = "runtime-watcher"

_known: dict[str, WatcherConfig] = {}
_checked: set[str] = set()  # digests of this process's settings already registered
_lock = threading.Lock()


def config_of(digest: str) -> WatcherConfig | None:
    """The settings of a digest (kept once read: rows never change)."""
    with _lock:
        found = _known.get(digest)
    if found is not None:
        return found
    values = RuntimeWatcherSettings.objects.filter(digest=digest).values_list("settings", flat=True).first()
    if values is None:
        return None
    config = WatcherConfig.from_dict(values)
    with _lock:
        _known[digest] = config
    return config


def fleet_digest() -> str:
    """The settings a runtime that names none gets: the old ones while a rollout of new ones
    holds, else the fleet's (registering this process's when the fleet has none yet)."""
    holding = (
        Rollout.objects.filter(kind=RolloutKind.RUNTIME_WATCHER, state__in=HOLDING_STATES)
        .order_by("-created_at")
        .values_list("from_value", flat=True)
        .first()
    )
    if holding and holding.get("value"):
        return holding["value"]
    default = RuntimeWatcherSettings.objects.filter(is_default=True).values_list("digest", flat=True).first()
    if default:
        return default
    with _lock:  # the fleet has none (yet): record this process's, whatever it remembers
        _checked.discard(WatcherConfig.from_settings().digest)
    return register_own()


def config_for(kyma: Kyma) -> WatcherConfig:
    """The settings ``kyma``'s runtime gets. A Kyma that names none is given the fleet's (once:
    only if it still names none, so a rollout's wave that named others meanwhile stands).
    Registers this process's settings once."""
    register_own()
    pin = row_or_default(kyma, "watcher_settings_pin")
    if not pin.digest:
        digest = fleet_digest()
        # (only when none is pinned: one a rollout's wave set meanwhile stands)
        pin.digest = watcher_settings_pin_first(kyma_id=kyma.pk, digest=digest) or digest
    return config_of(pin.digest) or WatcherConfig.from_settings()


def config_shown(kyma: Kyma) -> WatcherConfig:
    """What a page shows for ``kyma`` (never writes: a Kyma that names none shows the fleet's)."""
    digest = kyma.watcher_settings
    if not digest:
        holding = (
            Rollout.objects.filter(kind=RolloutKind.RUNTIME_WATCHER, state__in=HOLDING_STATES)
            .order_by("-created_at")
            .values_list("from_value", flat=True)
            .first()
        )
        digest = (holding or {}).get("value") or (
            RuntimeWatcherSettings.objects.filter(is_default=True).values_list("digest", flat=True).first()
            or ""
        )
    return (config_of(digest) if digest else None) or WatcherConfig.from_settings()


def register_own() -> str:
    """Record this process's settings; settings never seen before become the fleet's target, in
    a rollout when the fleet had others. Returns their digest. Once per process and digest."""
    own = WatcherConfig.from_settings()
    digest = own.digest
    with _lock:
        _known.setdefault(digest, own)
        if digest in _checked:
            return digest
    try:
        with transaction.atomic():
            _register(own, digest)
    except IntegrityError:  # another process recorded them at the same moment: it rolls them out
        pass
    with _lock:
        _checked.add(digest)
    return digest


def _register(own: WatcherConfig, digest: str) -> None:
    if RuntimeWatcherSettings.objects.filter(digest=digest).exists():
        default = RuntimeWatcherSettings.objects.filter(is_default=True).first()
        if default is not None and default.digest != digest:
            log.warning(
                "this process's runtime-watcher settings (image %s) are not the fleet's (image %s): "
                "runtimes get the fleet's; roll these out by hand (manage.py apply a Rollout) to change that",
                own.image,
                default.settings.get("image"),
            )
        return
    previous = RuntimeWatcherSettings.objects.select_for_update().filter(is_default=True).first()
    RuntimeWatcherSettings.objects.create(digest=digest, settings=own.as_dict(), is_default=previous is None)
    if previous is None:
        return
    settings_rollout(previous.digest, digest, automatic=True)


def settings_rollout(
    from_digest: str,
    to_digest: str,
    *,
    automatic: bool,
    created_by: object = None,
    name: str = "",
    waves: list | None = None,
    gate: dict | None = None,
) -> Rollout | None:
    """Roll ``to_digest`` out to every runtime; ``None`` (and at once) for a fleet of one."""
    rows = Kyma.objects.filter(deletion_timestamp__isnull=True).values_list(
        "id", "uid", "labels", "watcher_settings_pin__digest"
    )
    members = [Member(pk, str(uid), labels or {}, pin or from_digest) for pk, uid, labels, pin in rows]
    config = config_of(to_digest)
    rollout = rollout_start(
        change=Change(
            kind=RolloutKind.RUNTIME_WATCHER,
            subject=SUBJECT,
            change={"kind": RolloutKind.RUNTIME_WATCHER, "image": config.image if config else ""},
            from_value=from_digest,
            to_value=to_digest,
            members=members,
            policy=effective_policy(RolloutKind.RUNTIME_WATCHER),
        ),
        name=name or f"runtime-watcher-{to_digest[:8]}",
        automatic=automatic,
        created_by=created_by,
        waves=waves,
        gate=gate,
    )
    if rollout is None:  # at once: every runtime gets them, and they are the fleet's
        make_default(to_digest)
        watcher_settings_pin(kyma_ids=Kyma.objects.values_list("id", flat=True), digest=to_digest)
        queue.request([m.kyma_id for m in members], reason="runtime-watcher settings changed", urgent=True)
    return rollout


def make_default(digest: str) -> None:
    RuntimeWatcherSettings.objects.filter(is_default=True).exclude(digest=digest).update(is_default=False)
    RuntimeWatcherSettings.objects.filter(digest=digest).update(is_default=True)


def forget() -> None:
    """Forget what this process registered (tests: their database starts empty again)."""
    with _lock:
        _checked.clear()
