"""The runtime watcher in a runtime: its certificate, Secret, Service, Deployment and webhooks.

Each object carries a content hash; an object is applied only when the runtime's copy is missing,
carries another hash, or differs in a field we manage (drift: a scaled-down Deployment, a removed
webhook, edited Secret data), so a reconcile that finds everything in place writes nothing. The
Secret, Deployment and webhook configuration are read every reconcile; the rest is rechecked every
``RUNTIME_RECHECK_INTERVAL`` (see :mod:`.apply`). A targeted reconcile leaves a Ready watcher
alone (:func:`left_as_is`). The
Deployment's readiness decides the ``SKRWebhook`` condition: a crash-looping or unpullable watcher
is an Error (upstream once reported it Ready).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fleet.k8s.client import Permanent
from fleet.rollouts.targets import KymaTargets
from kernel.documents.dockerconfig import DockerConfigError
from pki import services as pki
from watchers import runtime_config
from watchers.models import Watcher
from watchers.rendering import (
    ADOPTED_MANAGERS,
    LEGACY_NETWORK_POLICIES,
    NAME,
    NAMESPACE,
    removal_order,
    runtime_watcher_resources,
)
from watchers.rollouts import watcher_from_fields
from watchers.status import rollout_mark, webhook_problem

from . import watcher_heartbeat
from .apply import (
    apply_all,
    apply_if_changed,
    key_of,
    live_object,
    needs_check,
    never_seen,
    prefetch,
    read_again_ahead,
)
from .context import FALSE, TRUE, ReconcileContext
from .drift import describe

STEP = "runtime-watcher"  # (its name in the registry: reconciler.steps)
# What breaks events or the watcher at once when changed: checked every reconcile.
EVERY_TIME = frozenset({"Secret", "Deployment", "ValidatingWebhookConfiguration"})
CONDITION = "SKRWebhook"
FAILING_REASONS = ("CrashLoopBackOff", "ImagePullBackOff", "ErrImagePull", "CreateContainerConfigError")


def active_watchers() -> list[Watcher]:
    """Watchers whose webhook goes into every runtime; one that cannot be rendered is left out
    (its status says why) rather than make every runtime refuse the whole configuration."""
    watchers = Watcher.objects.filter(deletion_timestamp__isnull=True).order_by("namespace", "name")
    return [w for w in watchers if not webhook_problem(w)]


def runtime_watchers(targets: KymaTargets, watchers: list[Watcher]) -> list[Watcher]:
    """The Watchers as this runtime gets them: where a rollout holds one and this runtime's wave
    has not started, its entry as it was (a new Watcher: not yet there)."""
    found = []
    for watcher in watchers:
        held = targets.watcher_entry(watcher)
        if held is None:
            found.append(watcher)
        elif held["fields"] is not None:
            old = watcher_from_fields(held["fields"])
            if not webhook_problem(old):
                found.append(old)
    return found


def left_as_is(ctx: ReconcileContext) -> bool:
    """Whether a targeted reconcile (:mod:`.engine`) leaves the runtime watcher alone: it was
    Ready, and an event from it just showed it works. What changes its objects on the control
    plane's side (a Watcher, a certificate renewed, the CA rotated) asks for a full reconcile of
    every runtime concerned; beat's sweep looks for drift. Its condition stays as it was."""
    if ctx.targeted and ctx.stored_condition_true(CONDITION):
        return ctx.keep_condition(CONDITION)
    return False


# (group, version, plural, namespaced) of a kind whose changes the runtime watcher reports
Watched = tuple[str, str, str, bool]


def _active(ctx: ReconcileContext) -> list[Watcher]:
    """:func:`active_watchers`, read once for a whole batch when the reconcile is one of a batch."""
    return ctx.shared.watchers(active_watchers) if ctx.shared is not None else active_watchers()


def render(ctx: ReconcileContext, watched: Sequence[Watched]) -> list[dict[str, Any]]:
    """The runtime watcher's objects for this runtime, in apply order (stamped): see :func:`_render`."""
    return _render(ctx, runtime_watchers(ctx.targets, _active(ctx)), watched)


def _render(
    ctx: ReconcileContext, watchers: list[Watcher], watched: Sequence[Watched]
) -> list[dict[str, Any]]:
    """The objects for these Watchers (as this runtime gets them), the webhook for owned objects
    reporting changes of the ``watched`` kinds (the registry's, :mod:`.steps`). Issues or renews
    the Kyma's certificate when due (:class:`pki.PKIError` when it cannot); raises
    :class:`DockerConfigError` when the image pull secret's file cannot be used. In a batch, the
    certificates due and the CA bundle are read once for all its Kymas (:mod:`.shared`)."""
    shared = ctx.shared
    if shared is not None:
        certificate = shared.certificate(ctx.kyma, ctx.now)
        tls = pki.runtime_secret_data(certificate, now=ctx.now, bundle=shared.ca_bundle())
    else:
        certificate = pki.certificate_for_kyma(kyma=ctx.kyma, now=ctx.now)
        tls = pki.runtime_secret_data(certificate, now=ctx.now)
    return runtime_watcher_resources(
        watchers=watchers,
        tls=tls,
        module_kinds=ctx.module_cr_kinds(),
        owned_kinds=watched,
        config=runtime_config.config_for(ctx.kyma),
    )


def step(ctx: ReconcileContext, watched: Sequence[Watched]) -> None:
    """The runtime watcher (unless a targeted reconcile leaves it as it is) and its heartbeat."""
    if not left_as_is(ctx):
        sync(ctx, _active(ctx), watched)
    watcher_heartbeat.evaluate(ctx)


def sync(ctx: ReconcileContext, watchers: list[Watcher], watched: Sequence[Watched] = ()) -> None:
    """Apply what changed and report readiness; a certificate problem is an Error. When the
    Deployment (read every reconcile) has no ready pod, every object of the watcher is read, as
    in a full reconcile: what a new pod needs (the PriorityClass, the Secret) may have gone."""
    watchers = runtime_watchers(ctx.targets, watchers)
    try:
        docs = _render(ctx, watchers, watched)
    except pki.PKIError as exc:
        ctx.condition("SKRWebhook", FALSE, "CertificateError", exc.message)
        ctx.fatal = exc.message
        return
    except DockerConfigError as exc:
        message = f"WATCHER_IMAGE_PULL_SECRET_FILE: {exc}"
        ctx.condition("SKRWebhook", FALSE, "ImagePullSecretError", message)
        ctx.fatal = message
        return
    prefetch(ctx, [doc for doc in docs if ctx.full or doc["kind"] in EVERY_TIME or needs_check(ctx, doc)])
    deployment = next(doc for doc in docs if doc["kind"] == "Deployment")
    check_all = ctx.full or _pods_missing(ctx, deployment)
    if check_all:
        prefetch(ctx, docs)  # (the rest)
    in_place = None
    for wave in _waves(docs):
        for doc, live in zip(wave, _apply(ctx, wave, check_all=check_all), strict=True):
            if doc is deployment:
                in_place = live
                if live is None:  # just applied: read again with the webhooks' wave, if it writes
                    read_again_ahead(ctx, STEP, doc)
    ctx.ahead.drop(STEP)
    _remove_legacy(ctx)
    ctx.sync.applied_watchers = sorted(rollout_mark(w) for w in watchers)
    # (just applied: its status is only known after the apply settled, read again)
    readiness(ctx, in_place if in_place is not None else live_object(ctx, deployment))


def _pods_missing(ctx: ReconcileContext, doc: dict[str, Any]) -> bool:
    """Whether the watcher's Deployment (read now, as every reconcile does: kept for its apply)
    lacks a ready pod it wants; a first reconcile's (never seen here) is not read."""
    if never_seen(ctx, doc):
        return False
    key = key_of(doc)
    live = ctx.listed[key] = live_object(ctx, doc)
    status = (live or {}).get("status") or {}
    return live is not None and status.get("readyReplicas", 0) < (live.get("spec") or {}).get("replicas", 1)


# The order the runtime watcher's objects are written in, wave by wave (the objects of a wave at
# once): what its pod needs (a Deployment's pods are refused without their PriorityClass), the
# Deployment, then the webhooks that call it.
_WAVE_OF = {"Deployment": 1, "ValidatingWebhookConfiguration": 2}


def _waves(docs: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """``docs`` (in apply order) in their waves."""
    waves: list[list[dict[str, Any]]] = [[] for _ in range(max(_WAVE_OF.values()) + 1)]
    for doc in docs:
        waves[_WAVE_OF.get(doc["kind"], 0)].append(doc)
    return [wave for wave in waves if wave]


def _apply(
    ctx: ReconcileContext, docs: list[dict[str, Any]], *, check_all: bool
) -> list[dict[str, Any] | None]:
    """:func:`apply_all` (the kinds in ``EVERY_TIME`` checked every time, every kind with
    ``check_all``), taking over what upstream's lifecycle-manager put there; a PriorityClass whose
    value must change (it cannot be updated) is replaced."""

    def every_time(doc: dict[str, Any]) -> bool:
        return check_all or doc["kind"] in EVERY_TIME

    def replaced(doc: dict[str, Any], exc: Permanent) -> dict[str, Any] | None:
        if doc["kind"] != "PriorityClass" or exc.status != 422:
            raise exc
        # Pods keep the priority they were admitted with; new ones get the new value.
        ctx.client.delete(doc["apiVersion"], doc["kind"], doc["metadata"]["name"])
        ctx.drift.append(describe(doc))
        return apply_if_changed(ctx, doc, every_time=every_time(doc))

    return apply_all(ctx, docs, every_time=every_time, adopt_from=ADOPTED_MANAGERS, recover=replaced)


def _remove_legacy(ctx: ReconcileContext) -> None:
    """Delete the NetworkPolicies this project used to name otherwise, in a runtime known to
    hold them (a key in ``RuntimeSync.runtime_verified``): nothing to do, and no request, elsewhere."""
    for name in LEGACY_NETWORK_POLICIES:
        key = "|".join(("networking.k8s.io/v1", "NetworkPolicy", NAMESPACE, name))
        if ctx.verified.pop(key, None) is not None:
            ctx.client.delete("networking.k8s.io/v1", "NetworkPolicy", name, NAMESPACE)
            ctx.change("removed", resource=f"NetworkPolicy {NAMESPACE}/{name}", action="renamed as upstream")


def readiness(ctx: ReconcileContext, deployment: dict[str, Any] | None) -> None:
    status = (deployment or {}).get("status") or {}
    generation = (deployment or {}).get("metadata", {}).get("generation", 0)
    if status.get("readyReplicas", 0) >= 1 and status.get("observedGeneration", generation) >= generation:
        ctx.condition("SKRWebhook", TRUE, "Ready", "the runtime watcher is ready")
        return
    for condition in status.get("conditions") or ():
        if condition.get("type") == "ReplicaFailure" and condition.get("status") == "True":
            # e.g. the runtime's pod security refuses the pod: no pod will ever say why
            detail = f"{condition.get('reason', '')}: {condition.get('message', '')}".strip(": ")
            message = f"the runtime watcher cannot run: {detail}"
            ctx.condition("SKRWebhook", FALSE, "WatcherFailing", message)
            ctx.fatal = message
            return
    for pod in ctx.client.list("v1", "Pod", NAMESPACE, labels=f"app={NAME}"):
        for container in (pod.get("status") or {}).get("containerStatuses") or []:
            waiting = (container.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") in FAILING_REASONS:
                detail = f"{waiting['reason']}: {waiting.get('message', '')}".rstrip(": ")
                message = f"the runtime watcher cannot run: {detail}"
                ctx.condition("SKRWebhook", FALSE, "WatcherFailing", message)
                ctx.fatal = message
                return
    ctx.condition("SKRWebhook", FALSE, "WatcherNotReady", "waiting for the runtime watcher to become ready")


def remove(ctx: ReconcileContext) -> list[tuple[str, str, str, str]]:
    """Take the runtime watcher out of the runtime (webhooks first, so nothing calls a dead
    server); returns what is still there (a finalizer someone put on it holds it)."""
    left = []
    for api_version, kind, name, namespace in removal_order():
        if ctx.client.delete_pending(api_version, kind, name, namespace) is not None:
            left.append((api_version, kind, namespace or "", name))
    _remove_legacy(ctx)
    return left
