"""What a real runtime has beyond its API server and controllers: a scheduler, a kubelet and a
pod network, for one :class:`~envtest.cluster.RealRuntime`, on this machine.

The stand-in does exactly those parts and nothing the API server or the controllers do:

- **scheduler**: every pod without a node is bound to this runtime's one Node (a ``Binding``);
- **pod network**: each pod gets its own address, a ``/32`` from ``10.244.0.0/16`` added to the
  loopback interface (so a process really listens at the pod's IP and port; loopback addresses
  themselves may not be endpoints). The EndpointSlice controller publishes those addresses, and
  the API server (``--enable-aggregator-routing``) calls webhooks at them: the path from the
  ValidatingWebhookConfiguration through the Service to the pod is the real one. Adding
  addresses needs root (``CAP_NET_ADMIN``); the Makefile leaves the tier out otherwise.
- **kubelet**: a pod whose container runs our runtime watcher (``python -m watchers.runtime``)
  becomes a local process, with the container's environment (``value`` and ``fieldRef``), its
  Secret volumes written to files (paths in the environment follow), bound to the pod's address
  and the container's own ports; its ``readinessProbe`` (``httpGet``) decides the pod's Ready
  condition; an exited process is restarted with a growing back-off and reported as
  ``CrashLoopBackOff``; a pod being deleted is stopped, then removed. Other pods just run (Ready
  at once, no process), as the emulator's do. The process runs as this user, not as the pod's
  ``runAsUser``, on this machine's filesystem: Pod Security is checked by the API server's
  admission, not enforced here. NetworkPolicies are not enforced (no CNI).

Everything runs on one thread polling the API server as a node identity that the audit policy
leaves out, so a test counts only its client's requests.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import itertools
import logging
import os
import random
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kubernetes
from kubernetes.client.rest import ApiException

from envtest.cluster import RealRuntime
from envtest.processes import Child

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[1]
WATCHER_MODULE = "watchers.runtime"
POLL = 0.1  # seconds between looks at the pods
SECRET_SYNC = 1.0  # seconds between refreshes of mounted Secret files (a kubelet takes ~1 min)
BACKOFF = (0.5, 10.0)


def runs_runtime_watcher(container: Mapping[str, Any]) -> bool:
    argv = [*(container.get("command") or ()), *(container.get("args") or ())]
    return any(a == "-m" and b == WATCHER_MODULE for a, b in itertools.pairwise(argv))


class PodAddresses:
    """``/32`` addresses on the loopback interface, one per pod, removed again on release."""

    def __init__(self) -> None:
        self.block = random.randrange(1, 255)  # 10.244.<block>.0/24 for this node
        self._free = list(range(2, 255))
        self._held: set[str] = set()

    def take(self) -> str:
        while self._free:
            address = f"10.244.{self.block}.{self._free.pop(0)}"
            result = _ip("addr", "add", f"{address}/32", "dev", "lo")
            if result.returncode == 0:
                self._held.add(address)
                return address
            if "File exists" not in result.stderr:
                raise RuntimeError(f"cannot add pod address {address} to lo: {result.stderr.strip()}")
        raise RuntimeError("no pod addresses left on this node")

    def release(self, address: str) -> None:
        if address in self._held:
            _ip("addr", "del", f"{address}/32", "dev", "lo")
            self._held.discard(address)

    def release_all(self) -> None:
        for address in list(self._held):
            self.release(address)


def _ip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=False)


@dataclass
class _Pod:
    namespace: str
    name: str
    uid: str
    ip: str
    container: dict[str, Any]
    workdir: Path
    child: Child | None = None
    ready: bool = False
    restarts: int = 0
    restart_at: float = 0.0
    files: dict[Path, bytes] = field(default_factory=dict)
    status_sent: tuple | None = None


class Node:
    """Scheduler, kubelet and pod network of one runtime (see the module docstring)."""

    def __init__(
        self,
        runtime: RealRuntime,
        *,
        name: str = "envtest-node",
        env: Mapping[str, str] | None = None,
        python: str = sys.executable,
        run_watchers: bool = True,
    ) -> None:
        self.runtime = runtime
        self.run_watchers = run_watchers  # False: watcher pods just run too (benchmarks)
        self.name = name
        self.env = dict(env or {})  # applied last to watcher processes (e.g. HEARTBEAT_INTERVAL)
        self.python = python
        self.workdir = runtime.workdir / "node"
        self.addresses = PodAddresses()
        self.api = kubernetes.config.new_client_from_config_dict(runtime.node_kubeconfig())
        self.core = kubernetes.client.CoreV1Api(self.api)
        self._pods: dict[str, _Pod] = {}  # by uid
        self._stop = threading.Event()
        self._last_secret_sync = 0.0
        self.errors: list[str] = []
        self._register()
        self._thread = threading.Thread(target=self._run, name=f"envtest-node-{runtime.name}", daemon=True)
        self._thread.start()

    # -- for tests ------------------------------------------------------------------------------

    def process(self, namespace: str, name_prefix: str) -> Child | None:
        """The running process of a pod whose name starts with ``name_prefix``."""
        for pod in self._pods.values():
            if pod.namespace == namespace and pod.name.startswith(name_prefix) and pod.child is not None:
                return pod.child
        return None

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        for pod in list(self._pods.values()):
            self._stop_pod(pod)
        self._pods.clear()
        self.addresses.release_all()
        self.api.close()

    # -- the loop -------------------------------------------------------------------------------

    def _register(self) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": self.name, "labels": {"kubernetes.io/hostname": self.name}},
        }
        self.core.create_node(body)
        now = _now()
        status = {
            "status": {
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "KubeletReady",
                        "message": "envtest node",
                        "lastHeartbeatTime": now,
                        "lastTransitionTime": now,
                    }
                ],
                "addresses": [{"type": "Hostname", "address": self.name}],
                "capacity": {"cpu": "8", "memory": "16Gi", "pods": "110"},
                "allocatable": {"cpu": "8", "memory": "16Gi", "pods": "110"},
            }
        }
        self.core.patch_node_status(self.name, status)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._sync()
            except Exception as exc:  # the node keeps going, as a kubelet would
                if not self._stop.is_set():
                    self.errors.append(f"{type(exc).__name__}: {exc}")
                    log.warning("envtest node %s: %s", self.runtime.name, exc)
            self._stop.wait(POLL)

    def _sync(self) -> None:
        seen = set()
        for pod in self.core.list_pod_for_all_namespaces(_preload_content=False).json()["items"]:
            meta, spec = pod["metadata"], pod["spec"]
            seen.add(meta["uid"])
            if meta.get("deletionTimestamp"):
                self._delete(pod)
            elif not spec.get("nodeName"):
                self._bind(pod)
            elif spec["nodeName"] == self.name:
                self._run_pod(pod)
        for uid in list(self._pods):
            if uid not in seen:  # removed without us (grace period 0, or the whole namespace)
                self._stop_pod(self._pods.pop(uid))
        if time.monotonic() - self._last_secret_sync > SECRET_SYNC:
            self._last_secret_sync = time.monotonic()
            for pod in self._pods.values():
                if pod.child is not None:
                    self._write_files(pod)

    def _bind(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
            "target": {"apiVersion": "v1", "kind": "Node", "name": self.name},
        }
        with contextlib.suppress(ApiException):  # bound meanwhile, or gone
            self.core.create_namespaced_binding(meta["namespace"], body, _preload_content=False)

    def _run_pod(self, pod: dict[str, Any]) -> None:
        meta, spec = pod["metadata"], pod["spec"]
        known = self._pods.get(meta["uid"])
        if known is None:
            container = spec["containers"][0]
            known = _Pod(
                namespace=meta["namespace"],
                name=meta["name"],
                uid=meta["uid"],
                ip=self.addresses.take(),
                container=container,
                workdir=self.workdir / f"{meta['namespace']}-{meta['name']}",
            )
            self._pods[known.uid] = known
            if self.run_watchers and runs_runtime_watcher(container):
                self._collect_files(known, spec)
                self._start(known, pod)
            else:
                known.ready = True  # other pods just run
        elif known.child is not None:
            self._supervise(known, pod)
        elif known.restart_at and time.monotonic() >= known.restart_at:
            known.restart_at = 0.0
            self._start(known, pod)
        self._report(known)

    # -- processes ------------------------------------------------------------------------------

    def _collect_files(self, pod: _Pod, spec: dict[str, Any]) -> None:
        """The container's Secret and ConfigMap volumes as files under the pod's directory."""
        volumes = {v["name"]: v for v in spec.get("volumes") or ()}
        pod.files.clear()
        for mount in pod.container.get("volumeMounts") or ():
            volume = volumes.get(mount["name"]) or {}
            data = self._volume_data(pod.namespace, volume)
            for key, content in data.items():
                pod.files[Path(mount["mountPath"]) / key] = content
        self._write_files(pod)

    def _volume_data(self, namespace: str, volume: Mapping[str, Any]) -> dict[str, bytes]:
        if "secret" in volume:
            secret = self.core.read_namespaced_secret(
                volume["secret"]["secretName"], namespace, _preload_content=False
            ).json()
            data = {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}
        elif "configMap" in volume:
            config_map = self.core.read_namespaced_config_map(
                volume["configMap"]["name"], namespace, _preload_content=False
            ).json()
            data = {k: v.encode() for k, v in (config_map.get("data") or {}).items()}
        else:
            return {}
        items = (volume.get("secret") or volume.get("configMap") or {}).get("items")
        if items:
            data = {item["path"]: data[item["key"]] for item in items if item["key"] in data}
        return data

    def _write_files(self, pod: _Pod) -> None:
        """(Re)write mounted files, atomically, as the kubelet's symlink swap does."""
        spec_volumes = None
        if pod.child is not None:  # a running pod: the Secret's current content
            spec_volumes = self._current_volumes(pod)
        if spec_volumes is not None:
            pod.files = spec_volumes
        for path, content in pod.files.items():
            target = self._local(pod, str(path))
            target.parent.mkdir(parents=True, exist_ok=True)
            if target.exists() and target.read_bytes() == content:
                continue
            temporary = target.with_name(f".{target.name}.tmp")
            temporary.write_bytes(content)
            os.replace(temporary, target)

    def _current_volumes(self, pod: _Pod) -> dict[Path, bytes] | None:
        try:
            live = self.core.read_namespaced_pod(pod.name, pod.namespace, _preload_content=False).json()
        except ApiException:
            return None
        volumes = {v["name"]: v for v in live["spec"].get("volumes") or ()}
        files: dict[Path, bytes] = {}
        for mount in pod.container.get("volumeMounts") or ():
            try:
                data = self._volume_data(pod.namespace, volumes.get(mount["name"]) or {})
            except ApiException:
                return None  # keep what is mounted, as a kubelet does when a Secret is gone
            for key, content in data.items():
                files[Path(mount["mountPath"]) / key] = content
        return files

    def _local(self, pod: _Pod, path: str) -> Path:
        return pod.workdir / "files" / path.lstrip("/")

    def _environment(self, pod: _Pod, live: dict[str, Any]) -> dict[str, str]:
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "PYTHONPATH": str(ROOT),
            "PYTHONUNBUFFERED": "1",
        }
        mounts = sorted(
            (m["mountPath"] for m in pod.container.get("volumeMounts") or ()), key=len, reverse=True
        )
        for item in pod.container.get("env") or ():
            value = item.get("value")
            if value is None:
                value = _field_ref(item.get("valueFrom") or {}, live, pod.ip)
            for mount in mounts:
                if value == mount or value.startswith(mount.rstrip("/") + "/"):
                    value = str(self._local(pod, value))
                    break
            env[item["name"]] = value
        env["BIND_ADDRESS"] = pod.ip
        env.update(self.env)
        return env

    def _start(self, pod: _Pod, live: dict[str, Any]) -> None:
        argv = [*(pod.container.get("command") or ()), *(pod.container.get("args") or ())]
        if argv and Path(argv[0]).name.startswith("python"):
            argv[0] = self.python
        pod.ready = False
        pod.child = Child(
            f"{pod.namespace}/{pod.name}",
            argv,
            log=pod.workdir / "output.log",
            env=self._environment(pod, live),
            cwd=ROOT,
        )

    def _supervise(self, pod: _Pod, live: dict[str, Any]) -> None:
        assert pod.child is not None
        if not pod.child.running():
            pod.restarts += 1
            pod.ready = False
            first, maximum = BACKOFF
            pod.restart_at = time.monotonic() + min(maximum, first * 2 ** (pod.restarts - 1))
            log.warning("envtest node: %s/%s exited; restart %d", pod.namespace, pod.name, pod.restarts)
            pod.child = None
            return
        pod.ready = self._probe(pod)

    def _probe(self, pod: _Pod) -> bool:
        http_get = (pod.container.get("readinessProbe") or {}).get("httpGet")
        if not http_get:
            return True
        port = http_get.get("port")
        if isinstance(port, str) and not port.isdigit():
            port = next(
                (p["containerPort"] for p in pod.container.get("ports") or () if p.get("name") == port), 0
            )
        url = f"http://{pod.ip}:{port}{http_get.get('path') or '/'}"
        try:
            with urllib.request.urlopen(url, timeout=1) as response:
                return response.status == 200
        except OSError:
            return False

    def _report(self, pod: _Pod) -> None:
        """Write the pod's status when it changed (phase, address, Ready, restarts)."""
        waiting = pod.child is None and bool(pod.restart_at)
        key = (pod.ready, pod.restarts, waiting)
        if key == pod.status_sent:
            return
        now = _now()
        ready = "True" if pod.ready else "False"
        state = (
            {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off restarting failed container"}}
            if waiting
            else {"running": {"startedAt": now}}
        )
        status = {
            "status": {
                "phase": "Running",
                "hostIP": pod.ip,
                "hostIPs": [{"ip": pod.ip}],
                "podIP": pod.ip,
                "podIPs": [{"ip": pod.ip}],
                "startTime": now,
                "conditions": [
                    {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
                    {"type": "Initialized", "status": "True", "lastTransitionTime": now},
                    {"type": "ContainersReady", "status": ready, "lastTransitionTime": now},
                    {"type": "Ready", "status": ready, "lastTransitionTime": now},
                ],
                "containerStatuses": [
                    {
                        "name": pod.container["name"],
                        "image": pod.container.get("image", ""),
                        "imageID": "",
                        "ready": pod.ready,
                        "started": not waiting,
                        "restartCount": pod.restarts,
                        "state": state,
                    }
                ],
            }
        }
        try:
            self.core.patch_namespaced_pod_status(pod.name, pod.namespace, status, _preload_content=False)
            pod.status_sent = key
        except ApiException as exc:
            if exc.status != 404:
                raise

    def _delete(self, pod: dict[str, Any]) -> None:
        """A pod being deleted: stop it, then confirm, as the kubelet does (grace period 0)."""
        meta = pod["metadata"]
        known = self._pods.pop(meta["uid"], None)
        if known is not None:
            self._stop_pod(known)
        if pod["spec"].get("nodeName") in (self.name, None, ""):
            body = {"gracePeriodSeconds": 0, "preconditions": {"uid": meta["uid"]}}
            with contextlib.suppress(ApiException):
                self.core.delete_namespaced_pod(meta["name"], meta["namespace"], body=body)

    def _stop_pod(self, pod: _Pod) -> None:
        if pod.child is not None:
            pod.child.stop(5)
            pod.child = None
        self.addresses.release(pod.ip)
        shutil.rmtree(pod.workdir, ignore_errors=True)


def _field_ref(value_from: Mapping[str, Any], pod: Mapping[str, Any], ip: str) -> str:
    path = (value_from.get("fieldRef") or {}).get("fieldPath", "")
    meta = pod["metadata"]
    return {
        "metadata.name": meta["name"],
        "metadata.namespace": meta["namespace"],
        "metadata.uid": meta["uid"],
        "status.podIP": ip,
        "status.hostIP": ip,
        "spec.nodeName": pod["spec"].get("nodeName", ""),
        "spec.serviceAccountName": pod["spec"].get("serviceAccountName", ""),
    }.get(path, "")


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
