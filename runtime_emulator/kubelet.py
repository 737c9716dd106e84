"""A loopback "kubelet" that runs the runtime watcher of emulated runtimes as real local processes.

Installed as an emulator's kubelet hook (``EmulatorHost(kubelet=ProcessKubelet(...))``), it starts
``python -m watchers.runtime`` for every Deployment whose container runs that module, the way a
node would run the pod:

- the container's env is passed through; its ports are remapped to free loopback ports (env
  variables named ``*_PORT`` that carry a container port follow) and ``BIND_ADDRESS`` is
  ``127.0.0.1``; mounted Secret/ConfigMap files are written under a private directory and env
  values pointing into a mount are rewritten to match;
- the Services selecting the pod are mapped to the process (``service_endpoints``), so the
  emulator's admission calls reach it over TLS with the webhook's real certificate;
- readiness is the container's ``readinessProbe`` (``httpGet``) answering 200; an exiting process
  is reported as ``CrashLoopBackOff`` and restarted with a growing back-off, as a kubelet would;
- a new pod template restarts the process; a changed Secret is rewritten into the mounted files in
  place (atomically, like the kubelet's symlink swap), so the watcher re-reads its certificate
  without a restart; a deleted Deployment stops it.

NetworkPolicies of the pod's namespace (:mod:`runtime_emulator.netpol`) are honoured when the
process starts, for what a runtime watcher needs: its egress to ``KCP_ADDR``'s port (and DNS,
UDP 53, when ``KCP_ADDR`` names a host rather than an address) — when denied, ``KCP_ADDR`` is
pointed at a closed loopback port, so the watcher runs but never reaches the listener, as behind a
real deny-all policy — and ingress to a Service's target port, without which the Service is not
mapped and the API server's admission calls fail (readiness probes come from the node and are
not subject to policies, as on a real cluster).

Other Deployments are left to the emulator's default (their pods just run). Everything runs on the
emulator host's event loop; :meth:`ProcessKubelet.close` stops every process.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import itertools
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runtime_emulator import catalog, netpol
from runtime_emulator.pods import ContainerLaunch, PodHealth
from runtime_emulator.workloads import DeploymentChange, DeploymentEvent

# Linux: a watcher process gets SIGTERM as soon as the process that started it dies (even by
# SIGKILL), so a killed demo or test leaves no watcher behind. The launcher asks for that
# (PR_SET_PDEATHSIG survives exec) and then becomes the watcher; if its parent died before, it
# exits instead.
DIE_WITH_PARENT = (
    "import ctypes, os, signal, sys; "
    "ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM); "
    "os.getppid() == int(sys.argv[1]) or sys.exit(0); "
    "os.execv(sys.argv[2], sys.argv[2:])"
)

logger = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[1]
MODULE = "watchers.runtime"
BENCH_RUN_MARK = "CONTROLPLANE_BENCH_RUN"
DNS_PORT = 53
NETWORK_POLICIES = "networkpolicies.networking.k8s.io"


def runs_runtime_watcher(container: ContainerLaunch) -> bool:
    """Whether a container's entry point is our runtime watcher (``python -m watchers.runtime``)."""
    argv = [*container.command, *container.args]
    return any(a == "-m" and b == MODULE for a, b in itertools.pairwise(argv))


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


@dataclass
class _Pod:
    """One running (or restarting) process standing for all replicas of a Deployment."""

    runtime: str
    namespace: str
    name: str
    workdir: Path
    event: DeploymentEvent
    container: ContainerLaunch
    ports: dict[int, int] = field(default_factory=dict)  # container port -> loopback port
    process: subprocess.Popen | None = None
    supervisor: asyncio.Task | None = None
    restarts: int = 0
    ready: bool = False

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.runtime, self.namespace, self.name)

    def local_path(self, path: str) -> Path:
        return self.workdir / "files" / path.lstrip("/")

    def metrics_url(self) -> str:
        port = self.probe_port()
        return f"http://127.0.0.1:{port}/metrics" if port else ""

    def probe(self) -> tuple[int, str] | None:
        """The loopback port and path of the container's readiness probe (``httpGet`` only)."""
        spec = _container_spec(self.event.deployment, self.container.name)
        http_get = ((spec.get("readinessProbe") or {}).get("httpGet")) or {}
        if not http_get:
            return None
        port = _container_port(spec, http_get.get("port"))
        return (self.ports.get(port, port), http_get.get("path") or "/") if port else None

    def probe_port(self) -> int:
        probe = self.probe()
        return probe[0] if probe else 0


class ProcessKubelet:
    """Kubelet hook running runtime-watcher Deployments as local processes (see module docs)."""

    def __init__(
        self,
        *,
        env: Mapping[str, str] | None = None,
        workdir: Path | None = None,
        python: str = sys.executable,
        restart_backoff: tuple[float, float] = (0.5, 10.0),
    ) -> None:
        self.env = dict(env or {})  # applied last: e.g. KCP_ADDR, HEARTBEAT_INTERVAL
        self.python = python
        self.restart_backoff = restart_backoff
        self._own_workdir = workdir is None
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="process-kubelet-"))
        self._pods: dict[tuple[str, str, str], _Pod] = {}

    # -- the hook --------------------------------------------------------------------------------

    async def __call__(self, event: DeploymentEvent) -> PodHealth | None:
        container = next((c for c in event.containers if runs_runtime_watcher(c)), None)
        key = (event.emulator.name, event.namespace, event.name)
        if event.change is DeploymentChange.DELETED:
            await self._stop(key, unmap=True)
            return None
        if container is None:
            return PodHealth.running()
        pod = self._pods.get(key)
        if (
            event.change is DeploymentChange.MOUNTS_CHANGED
            and pod is not None
            and pod.process is not None
            and pod.container.env == container.env
            and pod.container.command == container.command
        ):
            # A Secret's new content reaches the mounted files; the process keeps running.
            pod.event, pod.container = event, container
            self._write_files(pod)
            return PodHealth.running() if pod.ready else None
        await self._stop(key, unmap=False)
        pod = _Pod(event.emulator.name, event.namespace, event.name, self._pod_dir(key), event, container)
        self._pods[key] = pod
        pod.supervisor = asyncio.get_running_loop().create_task(self._supervise(pod))
        return None

    # -- information for tests and the demo ------------------------------------------------------

    def pod(self, runtime: str, namespace: str = "kyma-system", name: str = "skr-webhook") -> _Pod | None:
        return self._pods.get((runtime, namespace, name))

    def pids(self) -> list[int]:
        return [p.process.pid for p in self._pods.values() if p.process is not None]

    # -- lifecycle --------------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Stop every process (on the host's loop), all at once: one by one, fifty watchers that
        each take a moment to end outlasted the caller's wait (bench/module_chain.py). Every process
        is told to end before any is waited for: the waits share a small thread pool."""
        for pod in self._pods.values():
            if pod.supervisor is not None:
                pod.supervisor.cancel()  # no restart of what is told to end below
        for pod in self._pods.values():
            if pod.process is not None and pod.process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pod.process.pid, signal.SIGTERM)
        await asyncio.gather(*(self._stop(key, unmap=True) for key in list(self._pods)))
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    async def stop_process(
        self, runtime: str, namespace: str = "kyma-system", name: str = "skr-webhook"
    ) -> None:
        """Stop a pod's process for good without telling the emulator (a node that went away):
        its pods keep looking ready, but the watcher is silent."""
        pod = self._pods.get((runtime, namespace, name))
        if pod is not None:
            if pod.supervisor is not None:
                pod.supervisor.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await pod.supervisor
            await asyncio.to_thread(_terminate, pod.process)
            pod.process = None

    async def resume_process(
        self, runtime: str, namespace: str = "kyma-system", name: str = "skr-webhook"
    ) -> None:
        """Start a process stopped by :meth:`stop_process` again (the node is back)."""
        pod = self._pods.get((runtime, namespace, name))
        if pod is not None and pod.process is None:
            pod.supervisor = asyncio.get_running_loop().create_task(self._supervise(pod))

    # -- internals --------------------------------------------------------------------------------

    def _pod_dir(self, key: tuple[str, str, str]) -> Path:
        return self.workdir / "-".join(part.replace("/", "_") for part in key)

    async def _supervise(self, pod: _Pod) -> None:
        """Start the process, report readiness, restart it with a back-off when it exits."""
        first, maximum = self.restart_backoff
        try:
            while True:
                pod.ready = False
                self._start(pod)
                outcome = await self._watch(pod)
                if outcome == "exited":
                    pod.restarts += 1
                    code = pod.process.returncode if pod.process else None
                    logger.warning(
                        "runtime watcher of %s exited (%s); restart %d", pod.runtime, code, pod.restarts
                    )
                    await pod.event.report(PodHealth.crash_loop_backoff(pod.restarts))
                    await asyncio.sleep(min(maximum, first * 2 ** (pod.restarts - 1)))
        except asyncio.CancelledError:
            raise
        except Exception:  # the hook must never take the emulator down
            logger.exception("process kubelet: supervising %s/%s/%s failed", *pod.key)

    def _start(self, pod: _Pod) -> None:
        container = pod.container
        pod.ports = {port: free_port() for port in container.ports}
        self._write_files(pod)
        env = self._env(pod)
        argv = [*container.command, *container.args]
        if argv and Path(argv[0]).name.startswith("python"):
            argv[0] = self.python
        argv = (
            [self.python, "-c", DIE_WITH_PARENT, str(os.getpid()), *argv] if sys.platform == "linux" else argv
        )
        log = open(pod.workdir / "output.log", "ab")  # noqa: SIM115 - owned by the child
        try:
            pod.process = subprocess.Popen(
                argv,
                cwd=ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        finally:
            log.close()
        self._map_services(pod)

    def _env(self, pod: _Pod) -> dict[str, str]:
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "PYTHONPATH": str(ROOT),
            "PYTHONUNBUFFERED": "1",
        }
        # A benchmark's mark (bench/common.py): its processes are found and stopped by it.
        if BENCH_RUN_MARK in os.environ:
            env[BENCH_RUN_MARK] = os.environ[BENCH_RUN_MARK]
        mounts = sorted({_mount_root(pod, path) for path in pod.container.files}, key=len, reverse=True)
        for name, value in pod.container.env.items():
            if name.endswith("PORT") and value.isdigit() and int(value) in pod.ports:
                value = str(pod.ports[int(value)])
            for mount in mounts:
                if value == mount or value.startswith(mount.rstrip("/") + "/"):
                    value = str(pod.local_path(value))
                    break
            env[name] = value
        env["BIND_ADDRESS"] = "127.0.0.1"
        env.update(self.env)
        if "KCP_ADDR" in env and not self._may_reach(pod, env["KCP_ADDR"]):
            logger.info("network policies cut %s/%s/%s off from %s", *pod.key, env["KCP_ADDR"])
            env["KCP_ADDR"] = f"127.0.0.1:{free_port()}"  # nothing listens there
        return env

    def _policies(self, pod: _Pod) -> list[dict[str, Any]]:
        return list(pod.event.emulator.store.objects(NETWORK_POLICIES, pod.namespace))

    def _may_reach(self, pod: _Pod, address: str) -> bool:
        """Whether the pod's egress policies let it resolve and connect to ``host:port``."""
        host, colon, port = address.rpartition(":")
        port_number = int(port) if colon and port.isdigit() else 443
        host = host if colon else address
        policies, labels = self._policies(pod), _pod_labels(pod)
        if not netpol.allows(policies, labels, netpol.EGRESS, port_number):
            return False
        try:
            ipaddress.ip_address(host.strip("[]"))
        except ValueError:  # a name: it has to be resolved first
            return netpol.allows(policies, labels, netpol.EGRESS, DNS_PORT, "UDP")
        return True

    def _write_files(self, pod: _Pod) -> None:
        for path, content in pod.container.files.items():
            target = pod.local_path(path)
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, temporary = tempfile.mkstemp(dir=target.parent, prefix=".write-")
            with os.fdopen(fd, "wb") as handle:
                handle.write(content)
            os.replace(temporary, target)

    def _map_services(self, pod: _Pod) -> None:
        """Point every Service selecting this pod at the process (first matching target port)."""
        labels = _pod_labels(pod)
        policies = self._policies(pod)
        store = pod.event.emulator.store
        for service in store.objects(catalog.SERVICES.storage, pod.namespace):
            spec = service.get("spec") or {}
            selector = spec.get("selector") or {}
            if not selector or any(labels.get(k) != v for k, v in selector.items()):
                continue
            for port in spec.get("ports") or ():
                target = port.get("targetPort", port.get("port"))
                target = _container_port(_container_spec(pod.event.deployment, pod.container.name), target)
                if target in pod.ports and netpol.allows(policies, labels, netpol.INGRESS, target):
                    endpoint = ("127.0.0.1", pod.ports[target])
                    pod.event.emulator.service_endpoints[pod.namespace, service["metadata"]["name"]] = (
                        endpoint
                    )
                    break

    async def _watch(self, pod: _Pod) -> str:
        """Poll the readiness probe; ``"exited"`` when the process ends."""
        probe = pod.probe()
        while True:
            process = pod.process
            if process is None or process.poll() is not None:
                return "exited"
            healthy = probe is None or await _http_ok(*probe)
            if healthy != pod.ready:
                pod.ready = healthy
                if healthy:
                    self._map_services(pod)  # a Service created after the Deployment
                await pod.event.report(
                    PodHealth.running() if healthy else PodHealth.unready("readiness probe failed")
                )
            await asyncio.sleep(0.05 if not pod.ready else 0.5)

    async def _stop(self, key: tuple[str, str, str], *, unmap: bool) -> None:
        pod = self._pods.pop(key, None)
        if pod is None:
            return
        if pod.supervisor is not None:
            pod.supervisor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pod.supervisor
        await asyncio.to_thread(_terminate, pod.process)
        if unmap:
            endpoints = pod.event.emulator.service_endpoints
            for service_key, endpoint in list(endpoints.items()):
                if service_key[0] == pod.namespace and endpoint[1] in pod.ports.values():
                    del endpoints[service_key]
            shutil.rmtree(pod.workdir, ignore_errors=True)


def _terminate(process: subprocess.Popen | None, timeout: float = 5) -> None:
    if process is None or process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(5)


def _pod_labels(pod: _Pod) -> dict[str, str]:
    template = (pod.event.deployment.get("spec") or {}).get("template") or {}
    return dict((template.get("metadata") or {}).get("labels") or {})


def _container_spec(deployment: dict[str, Any], name: str) -> dict[str, Any]:
    containers = ((deployment.get("spec") or {}).get("template") or {}).get("spec", {}).get(
        "containers"
    ) or []
    return next((c for c in containers if c.get("name") == name), {})


def _container_port(spec: dict[str, Any], port: object) -> int:
    """A probe's or Service's target port as a container port number (names resolved)."""
    if isinstance(port, int):
        return port
    if isinstance(port, str):
        if port.isdigit():
            return int(port)
        for item in spec.get("ports") or ():
            if item.get("name") == port:
                return int(item.get("containerPort", 0))
    return 0


def _mount_root(pod: _Pod, path: str) -> str:
    spec = _container_spec(pod.event.deployment, pod.container.name)
    for mount in spec.get("volumeMounts") or ():
        root = mount.get("mountPath", "")
        if path == root or path.startswith(root.rstrip("/") + "/"):
            return root
    return path


async def _http_ok(port: int, path: str, timeout: float = 1.0) -> bool:
    """Whether ``GET http://127.0.0.1:<port><path>`` answers 200 (a kubelet's httpGet probe)."""
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), timeout)
    except (TimeoutError, OSError):
        return False
    try:
        writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode())
        await writer.drain()
        line = await asyncio.wait_for(reader.readline(), timeout)
        return line.split(b" ")[1:2] == [b"200"]
    except (TimeoutError, OSError):
        return False
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
