"""Pod health, and the pod/Deployment status documents a kubelet and the deployment controller write.

Timestamps of unchanged conditions and container states are carried over from the previous
status, so re-rendering a status for an unchanged situation is a no-op write (no new
resourceVersion, no watch event), as with the real controllers.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from runtime_emulator import catalog
from runtime_emulator.store import Store

_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
PENDING_REASONS = frozenset(
    {"ContainerCreating", "ImagePullBackOff", "ErrImagePull", "CreateContainerConfigError"}
)


@dataclass(frozen=True, slots=True)
class PodHealth:
    """How the containers of a Deployment's pods are doing."""

    ready: bool = True
    waiting_reason: str = ""  # e.g. CrashLoopBackOff, ImagePullBackOff, ContainerCreating
    message: str = ""
    restart_count: int = 0

    @property
    def phase(self) -> str:
        """The pod phase this health implies (waiting on a pull or mount: Pending)."""
        return "Pending" if self.waiting_reason in PENDING_REASONS else "Running"

    @classmethod
    def running(cls) -> PodHealth:
        """Ready containers (the default without a kubelet hook)."""
        return cls()

    @classmethod
    def unready(cls, message: str = "") -> PodHealth:
        """Running but failing its readiness probe: no waiting reason."""
        return cls(ready=False, message=message)

    @classmethod
    def crash_loop_backoff(cls, restarts: int = 5) -> PodHealth:
        """A container that keeps exiting."""
        return cls(False, "CrashLoopBackOff", "back-off 5m0s restarting failed container", restarts)

    @classmethod
    def image_pull_backoff(cls, image: str = "") -> PodHealth:
        """An image that cannot be pulled."""
        return cls(False, "ImagePullBackOff", f'Back-off pulling image "{image}"')

    @classmethod
    def creating(cls, message: str = "") -> PodHealth:
        """Containers not started yet (also what a kubelet hook's pods show until it reports)."""
        return cls(False, "ContainerCreating", message)


@dataclass(frozen=True, slots=True)
class ContainerLaunch:
    """What a kubelet needs to start one container: command, resolved env and mounted files."""

    name: str
    image: str
    command: tuple[str, ...]
    args: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    files: dict[str, bytes] = field(default_factory=dict)  # absolute path -> content
    ports: tuple[int, ...] = ()


def template_hash(template: Mapping[str, Any]) -> str:
    """A stable ``pod-template-hash`` (same alphabet and length as Kubernetes')."""
    digest = int.from_bytes(hashlib.sha256(json.dumps(template, sort_keys=True).encode()).digest()[:8], "big")
    chars = []
    for _ in range(10):
        digest, index = divmod(digest, len(_ALPHABET))
        chars.append(_ALPHABET[index])
    return "".join(chars)


def references(template: Mapping[str, Any]) -> set[tuple[str, str]]:
    """The (``secrets`` | ``configmaps``, name) pairs a pod template mounts or reads env from."""
    spec = template.get("spec") or {}
    refs: set[tuple[str, str]] = set()
    for volume in spec.get("volumes") or ():
        sources = [volume, *((volume.get("projected") or {}).get("sources") or ())]
        for source in sources:
            if "secret" in source:
                refs.add(("secrets", source["secret"].get("secretName") or source["secret"].get("name", "")))
            if "configMap" in source:
                refs.add(("configmaps", source["configMap"].get("name", "")))
    for container in spec.get("containers") or ():
        for src in container.get("envFrom") or ():
            if "secretRef" in src:
                refs.add(("secrets", src["secretRef"].get("name", "")))
            if "configMapRef" in src:
                refs.add(("configmaps", src["configMapRef"].get("name", "")))
        for env in container.get("env") or ():
            value_from = env.get("valueFrom") or {}
            if "secretKeyRef" in value_from:
                refs.add(("secrets", value_from["secretKeyRef"].get("name", "")))
            if "configMapKeyRef" in value_from:
                refs.add(("configmaps", value_from["configMapKeyRef"].get("name", "")))
    return refs


class MissingReference(Exception):
    """A non-optional Secret/ConfigMap (or key) a pod needs does not exist: the pod cannot start."""

    def __init__(self, health: PodHealth) -> None:
        super().__init__(health.message)
        self.health = health


class _Sources:
    def __init__(self, store: Store, namespace: str) -> None:
        self._store, self._namespace = store, namespace

    def data(self, plural: str, name: str, optional: bool, volume: str = "") -> dict[str, bytes]:
        """The decoded data of a Secret/ConfigMap ({} when optional and missing)."""
        rtype = catalog.SECRETS if plural == "secrets" else catalog.CONFIGMAPS
        obj = self._store.get(rtype.storage, self._namespace, name)
        if obj is None:
            if optional:
                return {}
            kind = "secret" if plural == "secrets" else "configmap"
            if volume:
                message = f'MountVolume.SetUp failed for volume "{volume}" : {kind} "{name}" not found'
                raise MissingReference(PodHealth.creating(message))
            raise MissingReference(
                PodHealth(False, "CreateContainerConfigError", f'{kind} "{name}" not found')
            )
        if plural == "secrets":
            return {k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()}
        binary = {k: base64.b64decode(v) for k, v in (obj.get("binaryData") or {}).items()}
        return {k: str(v).encode() for k, v in (obj.get("data") or {}).items()} | binary

    def volume_files(self, volume: Mapping[str, Any]) -> dict[str, bytes]:
        """Relative path → content for a secret, configMap or projected volume."""
        files: dict[str, bytes] = {}
        for source in [volume, *((volume.get("projected") or {}).get("sources") or ())]:
            for key, plural, name_key in (
                ("secret", "secrets", "secretName"),
                ("configMap", "configmaps", "name"),
            ):
                if key not in source:
                    continue
                ref = source[key]
                name = ref.get(name_key) or ref.get("name", "")
                data = self.data(plural, name, bool(ref.get("optional")), volume.get("name", ""))
                items = ref.get("items")
                files |= {i["path"]: data[i["key"]] for i in items if i["key"] in data} if items else data
        return files


def resolve_containers(
    store: Store, namespace: str, pod_name: str, template: Mapping[str, Any]
) -> tuple[ContainerLaunch, ...]:
    """Env and mounted files of each container, as the kubelet would materialise them."""
    spec = template.get("spec") or {}
    sources = _Sources(store, namespace)
    containers = spec.get("containers") or ()
    # Volumes are mounted before any container is created (ContainerCreating comes first).
    wanted = {m.get("name") for c in containers for m in c.get("volumeMounts") or ()}
    volumes = {
        v.get("name"): sources.volume_files(v) for v in spec.get("volumes") or () if v.get("name") in wanted
    }
    launches = []
    for container in containers:
        env: dict[str, str] = {}
        for src in container.get("envFrom") or ():
            prefix = src.get("prefix", "")
            for key, plural in (("secretRef", "secrets"), ("configMapRef", "configmaps")):
                if key in src:
                    data = sources.data(plural, src[key].get("name", ""), bool(src[key].get("optional")))
                    env |= {prefix + k: v.decode() for k, v in data.items()}
        for item in container.get("env") or ():
            env[item["name"]] = _env_value(sources, namespace, pod_name, spec, item)
        files: dict[str, bytes] = {}
        for mount in container.get("volumeMounts") or ():
            content = volumes.get(mount.get("name"))
            if content is None:
                continue
            if mount.get("subPath"):
                if mount["subPath"] in content:
                    files[mount["mountPath"]] = content[mount["subPath"]]
            else:
                base = mount["mountPath"].rstrip("/")
                files |= {f"{base}/{path}": data for path, data in content.items()}
        ports = tuple(p["containerPort"] for p in container.get("ports") or () if "containerPort" in p)
        launches.append(
            ContainerLaunch(
                container.get("name", ""),
                container.get("image", ""),
                tuple(container.get("command") or ()),
                tuple(container.get("args") or ()),
                env,
                files,
                ports,
            )
        )
    return tuple(launches)


def _env_value(
    sources: _Sources, namespace: str, pod_name: str, spec: Mapping[str, Any], item: Mapping[str, Any]
) -> str:
    if "value" in item or "valueFrom" not in item:
        return str(item.get("value", ""))
    value_from = item["valueFrom"]
    for key, plural in (("secretKeyRef", "secrets"), ("configMapKeyRef", "configmaps")):
        if key in value_from:
            ref = value_from[key]
            data = sources.data(plural, ref.get("name", ""), bool(ref.get("optional")))
            if ref.get("key") not in data:
                if ref.get("optional"):
                    return ""
                message = f"couldn't find key {ref.get('key')} in {plural[:-1]} {namespace}/{ref.get('name')}"
                raise MissingReference(PodHealth(False, "CreateContainerConfigError", message))
            return data[ref["key"]].decode()
    path = (value_from.get("fieldRef") or {}).get("fieldPath", "")
    known = {
        "metadata.name": pod_name,
        "metadata.namespace": namespace,
        "spec.nodeName": "emulated-node",
        "spec.serviceAccountName": spec.get("serviceAccountName", "default"),
        "status.podIP": "127.0.0.1",
        "status.hostIP": "127.0.0.1",
    }
    return known.get(path, "")


def _condition(
    kind: str, ok: bool, previous: Mapping[str, Mapping[str, Any]], now: str, **extra: str
) -> dict[str, Any]:
    status = "True" if ok else "False"
    before = previous.get(kind) or {}
    since = before.get("lastTransitionTime") if before.get("status") == status else None
    return {"type": kind, "status": status, "lastTransitionTime": since or now, **extra}


def pod_status(
    spec: Mapping[str, Any], health: PodHealth, previous: Mapping[str, Any] | None, now: str
) -> dict[str, Any]:
    """A pod's status for a health, keeping timestamps from ``previous`` where nothing changed."""
    previous = previous or {}
    conditions = {c["type"]: c for c in previous.get("conditions") or ()}
    started = previous.get("startTime") or now
    statuses = []
    old_states = {c.get("name"): c for c in previous.get("containerStatuses") or ()}
    for container in spec.get("containers") or ():
        name = container.get("name", "")
        before = (old_states.get(name) or {}).get("state") or {}
        if health.waiting_reason:
            state: dict[str, Any] = {"waiting": {"reason": health.waiting_reason, "message": health.message}}
        else:
            running_since = (before.get("running") or {}).get("startedAt") or now
            state = {"running": {"startedAt": running_since}}
        entry: dict[str, Any] = {
            "name": name,
            "image": container.get("image", ""),
            "imageID": "",
            "ready": health.ready,
            "started": not health.waiting_reason,
            "restartCount": health.restart_count,
            "state": state,
        }
        if health.waiting_reason == "CrashLoopBackOff":
            entry["lastState"] = {
                "terminated": {"exitCode": 1, "reason": "Error", "startedAt": started, "finishedAt": started}
            }
        statuses.append(entry)
    return {
        "phase": health.phase,
        "conditions": [
            _condition("PodScheduled", True, conditions, now),
            _condition("Initialized", True, conditions, now),
            _condition("ContainersReady", health.ready, conditions, now),
            _condition("Ready", health.ready, conditions, now),
        ],
        "hostIP": "127.0.0.1",
        "podIP": "127.0.0.1",
        "startTime": started,
        "qosClass": "BestEffort",
        "containerStatuses": statuses,
    }


def _max_unavailable(deployment: Mapping[str, Any], replicas: int) -> int:
    value = (((deployment.get("spec") or {}).get("strategy") or {}).get("rollingUpdate") or {}).get(
        "maxUnavailable", "25%"
    )
    if isinstance(value, str) and value.endswith("%"):
        return replicas * int(value[:-1]) // 100
    return int(value)


def deployment_status(
    deployment: Mapping[str, Any], pods: list[dict[str, Any]], pod_hash: str, now: str, failure: str = ""
) -> dict[str, Any]:
    """Status as the deployment controller computes it from the pods that exist (``failure``: why
    its pods cannot be created, shown as a ``ReplicaFailure`` condition)."""
    wanted = (deployment.get("spec") or {}).get("replicas", 1)
    previous = {c["type"]: c for c in (deployment.get("status") or {}).get("conditions") or ()}
    ready = sum(
        1
        for p in pods
        for c in (p.get("status") or {}).get("conditions") or ()
        if c["type"] == "Ready" and c["status"] == "True"
    )
    updated = sum(1 for p in pods if p["metadata"].get("labels", {}).get("pod-template-hash") == pod_hash)
    available = ready >= wanted - _max_unavailable(deployment, wanted)
    replica_set = f'ReplicaSet "{deployment["metadata"]["name"]}-{pod_hash}"'
    done = updated == wanted and ready == wanted
    counts = {
        "replicas": len(pods),
        "updatedReplicas": updated,
        "readyReplicas": ready,
        "availableReplicas": ready,
        "unavailableReplicas": max(wanted - ready, 0),
    }

    def condition(kind: str, ok: bool, reason: str, message: str) -> dict[str, Any]:
        cond = _condition(kind, ok, previous, now, reason=reason, message=message)
        before = previous.get(kind) or {}
        same = before.get("reason") == reason and before.get("status") == cond["status"]
        cond["lastUpdateTime"] = before.get("lastUpdateTime") if same else now
        return cond

    return {
        "observedGeneration": deployment["metadata"].get("generation", 1),
        **{
            key: value for key, value in counts.items() if value
        },  # zero counts are omitted, as on a real server
        "conditions": [
            condition(
                "Available",
                available,
                "MinimumReplicasAvailable" if available else "MinimumReplicasUnavailable",
                "Deployment has minimum availability."
                if available
                else "Deployment does not have minimum availability.",
            ),
            condition(
                "Progressing",
                True,
                "NewReplicaSetAvailable" if done else "ReplicaSetUpdated",
                f"{replica_set} has successfully progressed." if done else f"{replica_set} is progressing.",
            ),
            *([condition("ReplicaFailure", True, "FailedCreate", failure)] if failure else []),
        ],
    }
