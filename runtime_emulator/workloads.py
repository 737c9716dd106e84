"""A small deployment controller and the hook a "kubelet" plugs into.

After a Deployment changes, the emulator creates/replaces its Pods (labelled by the template plus
``pod-template-hash``, owned by the Deployment), writes their status, and reports the Deployment's
``status`` (observedGeneration, replica counts, ``Available``/``Progressing`` conditions). This runs
inline, before the triggering write is answered, so a client reading back right after its write
already sees the outcome. A rollout replaces all pods at once.

Pods a namespace's PodSecurity level refuses (:mod:`runtime_emulator.podsecurity`) are not
created and the kubelet hook is not called for them; the Deployment's status then carries a
``ReplicaFailure`` condition (reason ``FailedCreate``) with the refusal, as a real one does.

Pod health comes from, in this order:

1. a failure mode a test forced (:meth:`Workloads.set_health`), e.g. ``PodHealth.crash_loop_backoff()``;
2. a missing Secret/ConfigMap the pods need (``ContainerCreating`` / ``CreateContainerConfigError``);
3. with a kubelet hook installed: what the hook reported for the *current* pod template,
   ``ContainerCreating`` until it has;
4. otherwise: ready at once.

The kubelet hook
----------------
``emulator.kubelet`` (or ``EmulatorHost(kubelet=...)`` for every runtime of a host) is an async
callable ``hook(event: DeploymentEvent) -> PodHealth | None``. It is awaited on the host's event
loop, inline in the write that caused it, so it must return quickly (start a process in the
background; do not wait for it). It is called when a Deployment is ``CREATED``, when its pod
template changed (``TEMPLATE_CHANGED``), when a Secret/ConfigMap the template uses was written or
deleted (``MOUNTS_CHANGED``: restart with ``event.containers``' new env/files) and when it is
``DELETED`` (stop it). It is not called for replica or metadata-only changes: one process stands
for all replicas. ``event.containers`` carries each container's command, resolved env and mounted
Secret/ConfigMap files. While those cannot be resolved (a missing Secret) the hook is not called
and the pods show why; the first event a hook sees for a Deployment is always ``CREATED``, and
``DELETED`` only follows a ``CREATED``.

Return a ``PodHealth`` to settle readiness at once, or ``None`` and later ``await
event.report(health)`` (e.g. once the process answers its health check, or ``crash_loop_backoff``
when it exits). Reports for a template that has since changed are ignored. To make a webhook
process reachable, the hook maps the Service in front of it:
``event.emulator.service_endpoints[(namespace, service)] = ('127.0.0.1', port)``.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kmock import KubernetesError

from runtime_emulator import build, catalog, patches, podsecurity
from runtime_emulator.admission import UserInfo
from runtime_emulator.engine import Engine, Outcome, Write
from runtime_emulator.pods import (
    ContainerLaunch,
    MissingReference,
    PodHealth,
    deployment_status,
    pod_status,
    references,
    resolve_containers,
    template_hash,
)

if TYPE_CHECKING:
    from runtime_emulator.emulator import RuntimeEmulator

logger = logging.getLogger(__name__)
CONTROLLER = UserInfo("system:serviceaccount:kube-system:deployment-controller")
KUBELET = UserInfo("system:node:emulated-node", ("system:nodes", "system:authenticated"))


class DeploymentChange(enum.Enum):
    """Why a kubelet hook is called."""

    CREATED = "created"
    TEMPLATE_CHANGED = "template_changed"
    MOUNTS_CHANGED = "mounts_changed"
    DELETED = "deleted"


@dataclass(frozen=True, eq=False)
class DeploymentEvent:
    """What a kubelet hook is told about one Deployment."""

    change: DeploymentChange
    emulator: RuntimeEmulator
    namespace: str
    name: str
    deployment: dict[str, Any]  # a private copy, safe to keep
    template_hash: str
    containers: tuple[ContainerLaunch, ...]
    _workloads: Workloads = field(repr=False)

    async def report(self, health: PodHealth) -> None:
        """Set the pods' health for this event's pod template (ignored once the template changed)."""
        await self._workloads.report(self.namespace, self.name, self.template_hash, health)


Kubelet = Callable[[DeploymentEvent], Awaitable[PodHealth | None]]


class Workloads:
    """The deployment controller of one emulator."""

    __slots__ = ("_announced", "_engine", "_forced", "_lock", "_owner", "_reported", "kubelet")

    def __init__(self, engine: Engine, owner: RuntimeEmulator, kubelet: Kubelet | None) -> None:
        self._engine = engine
        self._owner = owner
        self.kubelet = kubelet
        self._forced: dict[tuple[str, str], PodHealth] | None = None
        self._reported: dict[tuple[str, str], tuple[str, PodHealth]] | None = None
        self._lock: asyncio.Lock | None = None
        self._announced: set[tuple[str, str]] | None = None  # Deployments the kubelet was told about

    async def observe(self, w: Write, old: dict[str, Any] | None, outcome: Outcome) -> None:
        """Engine commit observer: decide which Deployments need reconciling."""
        rtype, obj = w.rtype, outcome.obj
        assert obj is not None
        namespace, name = obj["metadata"].get("namespace") or "", obj["metadata"]["name"]
        if rtype is catalog.DEPLOYMENTS and w.subresource != "status":
            if outcome.removed:
                await self.reconcile(namespace, name, DeploymentChange.DELETED, obj)
            elif old is None:
                await self.reconcile(namespace, name, DeploymentChange.CREATED)
            elif _template(old) != _template(obj):
                await self.reconcile(namespace, name, DeploymentChange.TEMPLATE_CHANGED)
            else:
                await self.reconcile(namespace, name, None)
        elif rtype in (catalog.SECRETS, catalog.CONFIGMAPS):
            for deployment in self._engine.store.objects(catalog.DEPLOYMENTS.storage, namespace):
                if (rtype.plural, name) in references(_template(deployment)):
                    await self.reconcile(
                        namespace, deployment["metadata"]["name"], DeploymentChange.MOUNTS_CHANGED
                    )
        elif rtype is catalog.PODS and outcome.removed:
            for owner in obj["metadata"].get("ownerReferences") or ():
                if owner.get("kind") == "Deployment":
                    await self.reconcile(namespace, owner["name"], None)

    async def set_health(self, namespace: str, name: str, health: PodHealth | None) -> None:
        """Force (or with ``None`` stop forcing) the health of a Deployment's pods."""
        forced = self._forced if self._forced is not None else {}
        if health is None:
            forced.pop((namespace, name), None)
        else:
            forced[namespace, name] = health
        self._forced = forced
        await self.reconcile(namespace, name, None)

    async def report(self, namespace: str, name: str, pod_hash: str, health: PodHealth) -> None:
        """Record a kubelet's health report for a template hash; stale reports are dropped."""
        deployment = self._engine.store.get(catalog.DEPLOYMENTS.storage, namespace, name)
        if deployment is None or template_hash(_template(deployment)) != pod_hash:
            return  # stale: the template changed or the Deployment is gone
        reported = self._reported if self._reported is not None else {}
        reported[namespace, name] = (pod_hash, health)
        self._reported = reported
        await self.reconcile(namespace, name, None)

    def _health(self, key: tuple[str, str], pod_hash: str) -> PodHealth:
        if self.kubelet is None:
            return PodHealth.running()
        reported = (self._reported or {}).get(key)
        return reported[1] if reported and reported[0] == pod_hash else PodHealth.creating()

    async def reconcile(
        self, namespace: str, name: str, change: DeploymentChange | None, gone: dict[str, Any] | None = None
    ) -> None:
        """Bring one Deployment's pods and status in line with its spec (serialised per emulator)."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            await self._reconcile(namespace, name, change, gone)

    async def _reconcile(
        self, namespace: str, name: str, change: DeploymentChange | None, gone: dict[str, Any] | None
    ) -> None:
        store = self._engine.store
        deployment = store.get(catalog.DEPLOYMENTS.storage, namespace, name)
        owned = [
            pod
            for pod in store.objects(catalog.PODS.storage, namespace)
            if any(
                o.get("kind") == "Deployment" and o.get("name") == name
                for o in pod["metadata"].get("ownerReferences") or ()
            )
        ]
        if deployment is None:
            for pod in owned:
                await self._write(
                    Write("delete", catalog.PODS, namespace, pod["metadata"]["name"], user=CONTROLLER)
                )
            if self._reported:
                self._reported.pop((namespace, name), None)
            if change is DeploymentChange.DELETED and gone is not None:
                await self._notify(change, gone, ())
            return
        template = _template(deployment)
        pod_hash = template_hash(template)
        problem: PodHealth | None = None
        try:
            containers = resolve_containers(store, namespace, f"{name}-{pod_hash}", template)
        except MissingReference as missing:
            containers, problem = (), missing.health
        # Pods the namespace's PodSecurity level refuses are never created, so no kubelet runs them.
        refused = podsecurity.refusal(
            store.get(catalog.NAMESPACES.storage, None, namespace), template.get("spec") or {}
        )
        if change is not None and problem is None and not refused:
            await self._notify(change, deployment, containers)
        forced = (self._forced or {}).get((namespace, name))
        health = forced or problem or self._health((namespace, name), pod_hash)
        pods = await self._converge_pods(deployment, owned, template, pod_hash)
        now = build.now()
        for pod in pods:
            status = pod_status(template.get("spec") or {}, health, pod.get("status"), now)
            if status != pod.get("status"):
                body = {**pod, "status": status}
                await self._write(
                    Write(
                        "update",
                        catalog.PODS,
                        namespace,
                        pod["metadata"]["name"],
                        "status",
                        body,
                        field_manager="kubelet",
                        user=KUBELET,
                    )
                )
        pods = [store.get(catalog.PODS.storage, namespace, p["metadata"]["name"]) or p for p in pods]
        failure = f'pods "{name}-{pod_hash}-" is forbidden: {refused}' if refused else ""
        body = {**deployment, "status": deployment_status(deployment, pods, pod_hash, now, failure)}
        await self._write(
            Write(
                "update",
                catalog.DEPLOYMENTS,
                namespace,
                name,
                "status",
                body,
                field_manager="kube-controller-manager",
                user=CONTROLLER,
            )
        )

    async def _converge_pods(
        self, deployment: dict[str, Any], owned: list[dict[str, Any]], template: dict[str, Any], pod_hash: str
    ) -> list[dict[str, Any]]:
        meta = deployment["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        wanted = (deployment.get("spec") or {}).get("replicas", 1)
        current, stale = [], []
        for pod in owned:
            same = pod["metadata"].get("labels", {}).get("pod-template-hash") == pod_hash
            (current if same else stale).append(pod)
        for pod in stale + current[wanted:]:
            await self._write(
                Write("delete", catalog.PODS, namespace, pod["metadata"]["name"], user=CONTROLLER)
            )
        current = current[:wanted]
        template_meta = template.get("metadata") or {}
        while len(current) < wanted:
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"{name}-{pod_hash}-{build.random_suffix()}",
                    "namespace": namespace,
                    "labels": {**(template_meta.get("labels") or {}), "pod-template-hash": pod_hash},
                    "annotations": dict(template_meta.get("annotations") or {}),
                    "ownerReferences": [
                        {
                            "apiVersion": "apps/v1",
                            "kind": "Deployment",
                            "name": name,
                            "uid": meta["uid"],
                            "controller": True,
                            "blockOwnerDeletion": True,
                        }
                    ],
                },
                "spec": patches.clone(template.get("spec") or {}),
            }
            outcome = await self._write(
                Write(
                    "create",
                    catalog.PODS,
                    namespace,
                    body=pod,
                    field_manager="kube-controller-manager",
                    user=CONTROLLER,
                )
            )
            if outcome is None or outcome.obj is None:
                break  # rejected (e.g. by a webhook): the status will show the shortfall
            current.append(outcome.obj)
        return current

    async def _write(self, w: Write) -> Outcome | None:
        w.from_controller = True
        try:
            return await self._engine.write(w)
        except KubernetesError as exc:
            logger.info(
                "deployment controller: %s %s/%s failed: %s", w.verb, w.rtype.plural, w.name, exc.message
            )
            return None

    async def _notify(
        self, change: DeploymentChange, deployment: dict[str, Any], containers: tuple[ContainerLaunch, ...]
    ) -> None:
        if self.kubelet is None:
            return
        meta = deployment["metadata"]
        key = (meta["namespace"], meta["name"])
        announced = self._announced if self._announced is not None else set()
        self._announced = announced
        if change is DeploymentChange.DELETED:
            if key not in announced:
                return
            announced.discard(key)
        elif key not in announced:
            change = DeploymentChange.CREATED  # e.g. its Secret only appeared now: first start
            announced.add(key)
        pod_hash = template_hash(_template(deployment))
        event = DeploymentEvent(
            change, self._owner, key[0], key[1], patches.clone(deployment), pod_hash, containers, self
        )
        try:
            health = await self.kubelet(event)
        except Exception:
            logger.exception("kubelet hook failed for deployment %s/%s", *key)
            return
        if health is not None and change is not DeploymentChange.DELETED:
            reported = self._reported if self._reported is not None else {}
            reported[key] = (pod_hash, health)
            self._reported = reported


def _template(deployment: dict[str, Any]) -> dict[str, Any]:
    return (deployment.get("spec") or {}).get("template") or {}
