"""The kubelet of the node stand-in: one worker thread per pod, running its containers as local
processes the way a kubelet runs them with runc (see :mod:`envtest.node` for what it leaves out).

A pod's life:

1. **sandbox**: a network namespace of its own with a veth pair to this machine (the pod's address
   a ``/32`` of the node's block on the pod's side, routes both ways: :class:`PodNetwork`), so each
   pod has its own ``0.0.0.0`` and its own ports, as on a real node;
2. **volumes** written under the pod's directory and kept current: Secret and ConfigMap (``items``
   too), emptyDir, and projected ones (a ServiceAccount token from the TokenRequest API, bound to
   the pod and renewed at 80 % of its life; ConfigMaps; Secrets; the downward API); a Secret or
   ConfigMap that is missing (and not optional) holds the pod in ``ContainerCreating``;
3. **init containers** one after another, then the **containers**, each started by
   :mod:`envtest.container` with the image (:mod:`envtest.images`), the volumes at their mount
   paths, the pod's ``/etc/hosts``, and the environment a kubelet computes: the image's ``ENV``,
   ``KUBERNETES_SERVICE_HOST``/``PORT``, ``envFrom`` (ConfigMaps, Secrets, ``prefix``), ``env``
   (values with ``$(VAR)`` expansion, ``fieldRef``, ``secretKeyRef``, ``configMapKeyRef``,
   ``optional``), and ``$(VAR)`` expansion in command and args;
4. **probes**: startup, then liveness and readiness (``httpGet`` with headers, ``tcpSocket``), with
   their delays, periods, timeouts and thresholds; a failed startup or liveness probe kills the
   container, which restarts with the kubelet's back-off (``CrashLoopBackOff``) as the pod's
   ``restartPolicy`` says; readiness decides ``Ready``;
5. **status**: phase, conditions, the pod's address, container and init-container states with
   exit codes and restart counts, written whenever they change;
6. **termination**: on deletion, SIGTERM to every container, SIGKILL after the grace period, the
   sandbox removed; a Job's pod ends ``Succeeded`` or ``Failed`` by its containers' exit codes.
"""

from __future__ import annotations

import base64
import datetime as dt
import fcntl
import hashlib
import json
import logging
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envtest.images import Image
from envtest.processes import Child

if TYPE_CHECKING:
    from envtest.node import Node

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[1]
TICK = 0.1  # seconds between looks at a pod's containers and probes
VOLUME_SYNC = 1.0  # seconds between refreshes of Secret/ConfigMap/token files (a kubelet: ~1 min)
BACKOFF = (1.0, 20.0)  # first and largest restart delay (a kubelet: 10 s and 300 s)
DEFAULT_TOKEN_SECONDS = 3607
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
MARK = "CONTROLPLANE_BENCH_RUN"  # bench/common.py's mark of a benchmark run's processes


def _helper_env() -> dict[str, str]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(ROOT)}
    if MARK in os.environ:
        env[MARK] = os.environ[MARK]
    return env


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _ip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=False)


class PodNetwork:
    """Pod network namespaces of one node: addresses ``10.244.<block>.2-254``, each pod behind a
    veth pair whose host side carries the node's address ``10.244.<block>.1``."""

    _taken: set[int] = set()  # blocks of this process's nodes
    _taking = threading.Lock()
    # A block is held, across processes (each xdist worker, each test session), by a lock on a
    # file of its own, open for as long as this process lives: the kernel lets go of it when the
    # process ends, however it ends. Looking at the machine's addresses alone left a race: two
    # processes could pick the same block before either had given a pod an address in it.
    _held: dict[int, int] = {}
    BLOCK_LOCKS = Path(tempfile.gettempdir()) / "envtest-pod-blocks"

    def __init__(self, *, isolated: bool = True) -> None:
        # isolated: a network namespace per pod; else every pod shares this machine's, its
        # address on the loopback interface (a runtime's node: its watcher binds that address,
        # BIND_ADDRESS, and reaches servers of the tests on 127.0.0.1 as they are)
        self.isolated = isolated
        self.block = self.free_block()
        self.gateway = f"10.244.{self.block}.1"
        self._free = list(range(2, 255))
        self._lock = threading.Lock()

    @classmethod
    def free_block(cls) -> int:
        """A /24 no node of this process holds and no address or route of this machine is in
        (another test session's nodes, the kube tier's pod addresses)."""
        used = _ip("-4", "addr", "show").stdout + _ip("-4", "route", "show").stdout
        cls.BLOCK_LOCKS.mkdir(exist_ok=True)
        with cls._taking:
            free = [b for b in range(1, 255) if b not in cls._taken and f"10.244.{b}." not in used]
            random.shuffle(free)
            for block in free:
                if cls._hold(block):
                    cls._taken.add(block)
                    return block
        raise RuntimeError("pod network: every 10.244.<block>.0/24 is in use on this machine")

    @classmethod
    def _hold(cls, block: int) -> bool:
        """Whether this process now holds ``block`` (no other live process does)."""
        fd = os.open(cls.BLOCK_LOCKS / str(block), os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        cls._held[block] = fd
        return True

    def create(self, uid: str) -> tuple[str, str]:
        """(network namespace name, pod address) of a new sandbox."""
        with self._lock:
            if not self._free:
                raise RuntimeError("no pod addresses left on this node")
            address = f"10.244.{self.block}.{self._free.pop(0)}"
        if not self.isolated:
            result = _ip("addr", "add", f"{address}/32", "dev", "lo")
            if result.returncode != 0:
                raise RuntimeError(f"pod network: cannot add {address} to lo: {result.stderr.strip()}")
            return "", address
        tag = hashlib.sha256(f"{uid}{address}".encode()).hexdigest()[:8]
        netns, host = f"envtest-{tag}", f"ve{tag}"
        steps = [
            ("netns", "add", netns),
            ("link", "add", host, "type", "veth", "peer", "name", "eth0", "netns", netns),
            ("addr", "add", f"{self.gateway}/32", "dev", host),
            ("link", "set", host, "up"),
            ("-n", netns, "link", "set", "lo", "up"),
            ("-n", netns, "link", "set", "eth0", "up"),
            ("-n", netns, "addr", "add", f"{address}/32", "dev", "eth0"),
            ("-n", netns, "route", "add", self.gateway, "dev", "eth0"),
            ("-n", netns, "route", "add", "default", "via", self.gateway, "dev", "eth0"),
            ("route", "add", f"{address}/32", "dev", host),
        ]
        for step in steps:
            result = _ip(*step)
            if result.returncode != 0:
                self.delete(netns, address)
                raise RuntimeError(f"pod network: ip {' '.join(step)}: {result.stderr.strip()}")
        return netns, address

    def delete(self, netns: str, address: str) -> None:
        if netns:
            _ip("route", "del", f"{address}/32")
            _ip("netns", "del", netns)  # takes the veth pair with it
        else:
            _ip("addr", "del", f"{address}/32", "dev", "lo")
        with self._lock:
            number = int(address.rsplit(".", 1)[1])
            if number not in self._free:
                self._free.append(number)


@dataclass
class Probe:
    spec: dict[str, Any]
    next_at: float = 0.0
    failures: int = 0
    successes: int = 0

    @classmethod
    def of(cls, spec: Mapping[str, Any] | None, started: float) -> Probe | None:
        if not spec:
            return None
        return cls(dict(spec), next_at=started + float(spec.get("initialDelaySeconds", 0)))

    @property
    def period(self) -> float:
        return float(self.spec.get("periodSeconds", 10))

    @property
    def failure_threshold(self) -> int:
        return int(self.spec.get("failureThreshold", 3))


@dataclass
class Container:
    spec: dict[str, Any]
    init: bool = False
    child: Child | None = None
    started_at: float = 0.0
    restarts: int = 0
    restart_at: float = 0.0
    ready: bool = False
    started: bool = False  # the startup probe passed (or there is none)
    waiting: str = "ContainerCreating"
    message: str = ""
    exit_code: int | None = None
    finished: bool = False  # an init container that completed, or a container of a finished pod
    startup: Probe | None = None
    liveness: Probe | None = None
    readiness: Probe | None = None
    started_stamp: str = ""

    @property
    def name(self) -> str:
        return self.spec["name"]


@dataclass
class PodState:
    namespace: str
    name: str
    uid: str
    workdir: Path
    netns: str = ""
    ip: str = ""
    containers: list[Container] = field(default_factory=list)
    phase: str = "Pending"
    status_sent: str = ""
    start_time: str = ""


class PodWorker:
    """One pod's kubelet loop (module docstring), on a thread of its own."""

    def __init__(self, node: Node, pod: dict[str, Any]) -> None:
        self.node = node
        self.pod = pod
        meta, spec = pod["metadata"], pod["spec"]
        self.state = PodState(
            meta["namespace"], meta["name"], meta["uid"], node.workdir / f"{meta['namespace']}-{meta['name']}"
        )
        self.restart_policy = spec.get("restartPolicy", "Always")
        self.state.containers = [Container(dict(c), init=True) for c in spec.get("initContainers") or ()]
        self.state.containers += [Container(dict(c)) for c in spec.get("containers") or ()]
        self.placeholder = node.placeholder(pod)  # Ready without a process (module docstring)
        self.deleting = threading.Event()
        self.gone = threading.Event()  # the pod object vanished: stop without confirming
        self.done = threading.Event()
        self._token_due: dict[str, float] = {}
        self._last_volume_sync = 0.0
        self._thread = threading.Thread(target=self._run, name=f"pod-{meta['name']}", daemon=True)
        self._thread.start()

    # -- the loop ------------------------------------------------------------------------------

    def _run(self) -> None:
        """The loop goes on through errors (an API server's hiccup, a sandbox that could not be
        made yet), as a kubelet's does; each is recorded in the node's ``errors`` once."""
        try:
            while not self.node.stopping.is_set() and not self.deleting.is_set() and not self.gone.is_set():
                try:
                    if not self.state.ip:
                        self._sandbox()
                    self._step()
                    self._report()
                except Exception as exc:
                    self._failed(exc)
                    time.sleep(1)
                    continue
                if self.state.phase in ("Succeeded", "Failed"):
                    break  # a finished pod: its object stays until someone deletes it
                time.sleep(TICK)
        finally:
            self._terminate()
            self.done.set()

    def _failed(self, exc: Exception) -> None:
        message = f"pod {self.state.namespace}/{self.state.name}: {type(exc).__name__}: {exc}"
        if message not in self.node.errors:
            self.node.errors.append(message)
            log.error("envtest kubelet: %s", message, exc_info=exc)

    def _sandbox(self) -> None:
        self.state.workdir.mkdir(parents=True, exist_ok=True)
        self.state.netns, self.state.ip = self.node.network.create(self.state.uid)
        self.state.start_time = _now()

    def _step(self) -> None:
        now = time.monotonic()
        if self.placeholder:
            for container in self.state.containers:
                container.ready = container.started = container.finished = True
                container.exit_code, container.waiting = 0, ""
                container.started_stamp = container.started_stamp or _now()
            self.state.phase = "Running"
            return
        if now - self._last_volume_sync > VOLUME_SYNC:
            self._last_volume_sync = now
            self.node.hosts_file(self.state.workdir / "hosts", self.state.namespace, self.state.name)
            if not self._volumes():
                return
        for container in self.state.containers:
            if container.init and container.finished:
                continue
            if container.init:
                self._supervise(container, now)
                return  # init containers one at a time, in order
            self._supervise(container, now)
        mains = [c for c in self.state.containers if not c.init]
        if self.restart_policy != "Always" and all(c.finished for c in mains):
            self.state.phase = "Succeeded" if all(c.exit_code == 0 for c in mains) else "Failed"
        elif self.state.phase not in ("Succeeded", "Failed"):
            initialized = all(c.finished for c in self.state.containers if c.init)
            started = any(c.child or c.restarts for c in mains)
            self.state.phase = "Running" if initialized and started else "Pending"

    def _supervise(self, container: Container, now: float) -> None:
        if container.finished:
            return
        if container.child is None:
            if now >= container.restart_at:
                self._start(container)
            return
        if not container.child.running():
            self._exited(container, container.child.proc.returncode, now)
            return
        self._probe(container, now)

    def _exited(self, container: Container, code: int, now: float) -> None:
        container.child = None
        container.exit_code = code
        container.ready = False
        container.started = False
        if container.init:
            if code == 0:
                container.finished = True
                return
        elif self.restart_policy == "Never" or (self.restart_policy == "OnFailure" and code == 0):
            container.finished = True
            return
        if container.init and self.restart_policy == "Never":
            container.finished = True
            self.state.phase = "Failed"
            self.deleting.set()  # nothing more runs in a failed pod; its object stays
            return
        container.restarts += 1
        first, largest = BACKOFF
        container.restart_at = now + min(largest, first * 2 ** (container.restarts - 1))
        container.waiting, container.message = (
            "CrashLoopBackOff",
            f"back-off restarting failed container (exit {code})",
        )
        log.warning(
            "envtest kubelet: %s/%s %s exited %s", self.state.namespace, self.state.name, container.name, code
        )

    # -- starting a container ------------------------------------------------------------------

    def _start(self, container: Container) -> None:
        image = self.node.image(container.spec.get("image", ""), container.spec)
        if image is None:
            container.waiting = "ErrImagePull"
            container.message = f"image {container.spec.get('image')!r} is not in the node's registry"
            container.restart_at = time.monotonic() + 2
            return
        try:
            env = self._environment(container, image)
        except MissingReference as exc:
            container.waiting, container.message = "CreateContainerConfigError", str(exc)
            container.restart_at = time.monotonic() + 1
            return
        command, args = container.spec.get("command"), container.spec.get("args")
        # With a command the image's ENTRYPOINT and CMD are both ignored.
        argv = [*command, *(args or ())] if command else [*image.entrypoint, *(args or image.cmd)]
        argv = [_expand(word, env) for word in argv]
        spec = {
            "root": str(self.state.workdir / "rootfs" / container.name),
            "mounts": self._mounts(container, image),
            "workdir": container.spec.get("workingDir") or image.workdir,
            "argv": argv,
            "env": env,
            "hostname": self.state.name[:63],
        }
        spec_file = self.state.workdir / f"{container.name}.json"
        spec_file.write_text(json.dumps(spec))
        container.child = Child(
            f"{self.state.namespace}/{self.state.name}/{container.name}",
            [*(["ip", "netns", "exec", self.state.netns] if self.state.netns else []),
             "unshare", "--mount", "--uts", "--propagation", "private",
             sys.executable, "-m", "envtest.container", str(spec_file)],
            log=self.state.workdir / f"{container.name}.log",
            env=_helper_env(),
            cwd=ROOT,
        )  # fmt: skip
        now = time.monotonic()
        container.started_at, container.started_stamp = now, _now()
        container.waiting, container.message, container.exit_code = "", "", None
        container.startup = Probe.of(container.spec.get("startupProbe"), now)
        container.liveness = Probe.of(container.spec.get("livenessProbe"), now)
        container.readiness = Probe.of(container.spec.get("readinessProbe"), now)
        container.started = container.startup is None
        container.ready = False

    def _mounts(self, container: Container, image: Image) -> list[dict[str, Any]]:
        mounts = [
            {"source": str(image.app), "target": "/app", "readOnly": False},
            {"source": str(image.venv), "target": "/opt/venv", "readOnly": True},
            {"source": str(self.state.workdir / "hosts"), "target": "/etc/hosts", "readOnly": True},
            {"source": str(self.node.resolv_conf), "target": "/etc/resolv.conf", "readOnly": True},
        ]
        for mount in container.spec.get("volumeMounts") or ():
            mounts.append(
                {
                    "source": str(self.state.workdir / "volumes" / mount["name"]),
                    "target": mount["mountPath"],
                    "readOnly": bool(mount.get("readOnly")),
                }
            )
        return mounts

    def _environment(self, container: Container, image: Image) -> dict[str, str]:
        env: dict[str, str] = {"HOSTNAME": self.state.name, **image.env}
        env.update(self.node.service_environment())
        for source in container.spec.get("envFrom") or ():
            prefix = source.get("prefix", "")
            for key, value in self._env_source(source).items():
                env[prefix + key] = value
        for item in container.spec.get("env") or ():
            if "value" in item:
                env[item["name"]] = _expand(item["value"], env)
            elif "valueFrom" in item:
                value = self._value_from(item["valueFrom"])
                if value is not None:
                    env[item["name"]] = value
            else:
                env[item["name"]] = ""
        env.update(self.node.extra_env(container.spec, self.state.ip))
        if MARK in os.environ:  # a benchmark's run: its processes are found (and stopped) by it
            env[MARK] = os.environ[MARK]
        return env

    def _env_source(self, source: Mapping[str, Any]) -> dict[str, str]:
        if "configMapRef" in source:
            ref = source["configMapRef"]
            data = self.node.read("configmaps", self.state.namespace, ref["name"])
            if data is None:
                if ref.get("optional"):
                    return {}
                raise MissingReference(f'configmap "{ref["name"]}" not found')
            return dict(data.get("data") or {})
        ref = source["secretRef"]
        data = self.node.read("secrets", self.state.namespace, ref["name"])
        if data is None:
            if ref.get("optional"):
                return {}
            raise MissingReference(f'secret "{ref["name"]}" not found')
        return {k: base64.b64decode(v).decode() for k, v in (data.get("data") or {}).items()}

    def _value_from(self, value_from: Mapping[str, Any]) -> str | None:
        if "fieldRef" in value_from:
            return self._field(value_from["fieldRef"]["fieldPath"])
        for kind, plural in (("secretKeyRef", "secrets"), ("configMapKeyRef", "configmaps")):
            if kind in value_from:
                ref = value_from[kind]
                found = self.node.read(plural, self.state.namespace, ref["name"])
                data = (found or {}).get("data") or {}
                if ref["key"] not in data:
                    if ref.get("optional"):
                        return None
                    raise MissingReference(f'{plural[:-1]} "{ref["name"]}" has no key {ref["key"]!r}')
                value = data[ref["key"]]
                return base64.b64decode(value).decode() if plural == "secrets" else value
        return ""  # resourceFieldRef: not stood in for

    def _field(self, path: str) -> str:
        meta, spec = self.pod["metadata"], self.pod["spec"]
        labels = re.fullmatch(r"metadata\.(labels|annotations)\['(.+)'\]", path)
        if labels:
            return (meta.get(labels.group(1)) or {}).get(labels.group(2), "")
        return {
            "metadata.name": meta["name"],
            "metadata.namespace": meta["namespace"],
            "metadata.uid": meta["uid"],
            "status.podIP": self.state.ip,
            "status.hostIP": self.node.network.gateway,
            "spec.nodeName": spec.get("nodeName", ""),
            "spec.serviceAccountName": spec.get("serviceAccountName", ""),
        }.get(path, "")

    # -- volumes -------------------------------------------------------------------------------

    def _volumes(self) -> bool:
        """Write every volume's files; False while one is missing (the pod waits, as a kubelet
        waits to mount it)."""
        base = self.state.workdir / "volumes"
        for volume in self.pod["spec"].get("volumes") or ():
            directory = base / volume["name"]
            directory.mkdir(parents=True, exist_ok=True)
            try:
                files = self._volume_files(volume)
            except MissingReference as exc:
                for container in self.state.containers:
                    if container.child is None and not container.finished:
                        container.waiting, container.message = "ContainerCreating", f"MountVolume: {exc}"
                return False
            for relative, content in files.items():
                _write_atomically(directory / relative, content)
        return True

    def _volume_files(self, volume: Mapping[str, Any]) -> dict[str, bytes]:
        if "emptyDir" in volume:
            return {}
        if "secret" in volume:
            source = volume["secret"]
            return self._object_files("secrets", source["secretName"], source)
        if "configMap" in volume:
            source = volume["configMap"]
            return self._object_files("configmaps", source["name"], source)
        if "downwardAPI" in volume:
            return self._downward(volume["downwardAPI"].get("items") or ())
        if "projected" in volume:
            files: dict[str, bytes] = {}
            for source in volume["projected"].get("sources") or ():
                if "serviceAccountToken" in source:
                    token = source["serviceAccountToken"]
                    files[token["path"]] = self._token(token).encode()
                elif "configMap" in source:
                    files.update(
                        self._object_files("configmaps", source["configMap"]["name"], source["configMap"])
                    )
                elif "secret" in source:
                    files.update(self._object_files("secrets", source["secret"]["name"], source["secret"]))
                elif "downwardAPI" in source:
                    files.update(self._downward(source["downwardAPI"].get("items") or ()))
            return files
        return {}  # hostPath and the rest: not stood in for

    def _object_files(self, plural: str, name: str, source: Mapping[str, Any]) -> dict[str, bytes]:
        found = self.node.read(plural, self.state.namespace, name)
        if found is None:
            if source.get("optional"):
                return {}
            raise MissingReference(f'{plural[:-1]} "{name}" not found')
        data = {
            k: base64.b64decode(v) if plural == "secrets" else v.encode()
            for k, v in (found.get("data") or {}).items()
        }
        items = source.get("items")
        if items:
            return {item["path"]: data[item["key"]] for item in items if item["key"] in data}
        return data

    def _downward(self, items: Any) -> dict[str, bytes]:
        return {
            item["path"]: self._field(item["fieldRef"]["fieldPath"]).encode()
            for item in items
            if "fieldRef" in item
        }

    def _token(self, source: Mapping[str, Any]) -> str:
        """A token of the pod's ServiceAccount bound to the pod, renewed at 80 % of its life."""
        key = json.dumps(source, sort_keys=True)
        cached = self._token_due.get(key)
        path = self.state.workdir / "tokens" / hashlib.sha256(key.encode()).hexdigest()[:12]
        if cached is not None and time.monotonic() < cached and path.exists():
            return path.read_text()
        seconds = int(source.get("expirationSeconds", DEFAULT_TOKEN_SECONDS))
        spec: dict[str, Any] = {
            "expirationSeconds": seconds,
            "boundObjectRef": {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": self.state.name,
                "uid": self.state.uid,
            },
        }
        if source.get("audience"):
            spec["audiences"] = [source["audience"]]
        account = self.pod["spec"].get("serviceAccountName") or "default"
        answer = self.node.create_token(self.state.namespace, account, spec)
        token = answer["status"]["token"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(token)
        self._token_due[key] = time.monotonic() + 0.8 * seconds
        return token

    # -- probes --------------------------------------------------------------------------------

    def _probe(self, container: Container, now: float) -> None:
        if not container.started:
            probe = container.startup
            assert probe is not None
            if now >= probe.next_at:
                probe.next_at = now + probe.period
                if self._check(probe.spec, container):
                    container.started = True
                    for later in (container.readiness, container.liveness):
                        if later is not None:  # the kubelet's workers start with the startup's success
                            later.next_at = max(later.next_at, now)
                else:
                    probe.failures += 1
                    if probe.failures >= probe.failure_threshold:
                        self._kill(container, "startup probe failed")
            return
        liveness = container.liveness
        if liveness is not None and now >= liveness.next_at:
            liveness.next_at = now + liveness.period
            if self._check(liveness.spec, container):
                liveness.failures = 0
            else:
                liveness.failures += 1
                if liveness.failures >= liveness.failure_threshold:
                    self._kill(container, "liveness probe failed")
                    return
        readiness = container.readiness
        if readiness is None:
            container.ready = True
        elif now >= readiness.next_at:
            readiness.next_at = now + readiness.period
            if self._check(readiness.spec, container):
                readiness.failures = 0
                readiness.successes += 1
                if readiness.successes >= int(readiness.spec.get("successThreshold", 1)):
                    container.ready = True
            else:
                readiness.successes = 0
                readiness.failures += 1
                if readiness.failures >= readiness.failure_threshold:
                    container.ready = False

    def _check(self, spec: Mapping[str, Any], container: Container) -> bool:
        timeout = float(spec.get("timeoutSeconds", 1))
        if "httpGet" in spec:
            get = spec["httpGet"]
            port = _port(get.get("port"), container.spec)
            scheme = (get.get("scheme") or "HTTP").lower()
            host = get.get("host") or self.state.ip
            headers = {h["name"]: h["value"] for h in get.get("httpHeaders") or ()}
            request = urllib.request.Request(
                f"{scheme}://{host}:{port}{get.get('path') or '/'}", headers=headers
            )
            try:
                with _opener.open(request, timeout=timeout) as answer:
                    return 200 <= answer.status < 400
            except urllib.error.HTTPError as exc:
                return 200 <= exc.code < 400
            except (OSError, ValueError):
                return False
        if "tcpSocket" in spec:
            port = _port(spec["tcpSocket"].get("port"), container.spec)
            try:
                socket.create_connection((self.state.ip, port), timeout=timeout).close()
            except OSError:
                return False
            return True
        return True  # exec and grpc probes are not stood in for: they pass

    def _kill(self, container: Container, why: str) -> None:
        log.warning(
            "envtest kubelet: %s/%s %s: %s, killing",
            self.state.namespace,
            self.state.name,
            container.name,
            why,
        )
        if container.child is not None:
            container.child.stop(self._grace())

    # -- status --------------------------------------------------------------------------------

    def _report(self) -> None:
        state = self.state
        mains = [c for c in state.containers if not c.init]
        initialized = all(c.finished for c in state.containers if c.init)
        ready = initialized and bool(mains) and all(c.ready for c in mains) and state.phase == "Running"
        status = {
            "phase": state.phase,
            "hostIP": self.node.network.gateway,
            "hostIPs": [{"ip": self.node.network.gateway}],
            "podIP": state.ip,
            "podIPs": [{"ip": state.ip}] if state.ip else [],
            "startTime": state.start_time,
            "conditions": [
                {"type": "PodScheduled", "status": "True"},
                {"type": "Initialized", "status": str(initialized)},
                {"type": "ContainersReady", "status": str(ready)},
                {"type": "Ready", "status": str(ready)},
            ],
            "initContainerStatuses": [_container_status(c) for c in state.containers if c.init],
            "containerStatuses": [_container_status(c) for c in mains],
        }
        key = json.dumps(status, sort_keys=True)
        if key == state.status_sent:
            return
        stamped = json.loads(key)
        for condition in stamped["conditions"]:
            condition["lastTransitionTime"] = _now()
        if self.node.patch_status(state.namespace, state.name, {"status": stamped}):
            state.status_sent = key

    # -- the end -------------------------------------------------------------------------------

    def _grace(self) -> float:
        meta = self.pod["metadata"]
        grace = meta.get("deletionGracePeriodSeconds")
        if grace is None:
            grace = self.pod["spec"].get("terminationGracePeriodSeconds", 30)
        return max(1.0, float(grace))

    def _terminate(self) -> None:
        """SIGTERM to every running container at once, SIGKILL after the grace period."""
        running = [c for c in self.state.containers if c.child is not None]
        stoppers = [
            threading.Thread(target=c.child.stop, args=(self._grace(),), daemon=True) for c in running
        ]  # type: ignore[union-attr]
        for stopper in stoppers:
            stopper.start()
        for stopper in stoppers:
            stopper.join()
        for container in running:
            container.child = None
        if self.state.ip:
            self.node.network.delete(self.state.netns, self.state.ip)
            self.state.netns = self.state.ip = ""
        if self.gone.is_set():
            shutil.rmtree(self.state.workdir, ignore_errors=True)

    def update(self, pod: dict[str, Any]) -> None:
        self.pod = pod
        if pod["metadata"].get("deletionTimestamp"):
            self.deleting.set()

    def ready(self) -> bool:
        return all(c.ready for c in self.state.containers if not c.init)

    def process(self, name: str | None = None) -> Child | None:
        for container in self.state.containers:
            if (name is None or container.name == name) and container.child is not None:
                return container.child
        return None


class MissingReference(Exception):
    """A ConfigMap, Secret or key the pod needs is not there (yet)."""


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # a probe judges the first answer: a redirect (3xx) is a success


_opener = urllib.request.build_opener(_NoRedirect, urllib.request.ProxyHandler({}))


def _port(port: Any, container: Mapping[str, Any]) -> int:
    if isinstance(port, str) and not port.isdigit():
        return next(p["containerPort"] for p in container.get("ports") or () if p.get("name") == port)
    return int(port)


def _expand(value: str, env: Mapping[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion: defined variables are replaced, ``$$`` is a ``$``,
    anything else stays as written."""

    def one(match: re.Match) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return env[name] if name in env else match.group(0)

    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)", one, value)


def _container_status(container: Container) -> dict[str, Any]:
    if container.child is not None or (container.ready and container.finished and not container.init):
        state: dict[str, Any] = {"running": {"startedAt": container.started_stamp}}
    elif container.finished or (container.exit_code is not None and not container.waiting):
        code = container.exit_code or 0
        state = {"terminated": {"exitCode": code, "reason": "Completed" if code == 0 else "Error"}}
    else:
        state = {
            "waiting": {"reason": container.waiting or "ContainerCreating", "message": container.message}
        }
    return {
        "name": container.name,
        "image": container.spec.get("image", ""),
        "imageID": "",
        "ready": container.ready,
        "started": container.child is not None and container.started,
        "restartCount": container.restarts,
        "state": state,
    }


def _write_atomically(path: Path, content: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() and path.read_bytes() == content:
        return
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_bytes(content)
    os.replace(temporary, path)
