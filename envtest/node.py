"""What a real cluster has beyond its API server and controllers: a scheduler, a kubelet, a pod
network, kube-proxy and cluster DNS, for one :class:`~envtest.cluster.RealRuntime`, on this machine.

The stand-in does exactly those parts and nothing the API server or the controllers do:

- **scheduler**: every pod without a node is bound to this cluster's one Node (a ``Binding``);
- **pod network**: each pod gets an address of the node's ``/24`` of ``10.244.0.0/16``
  (:class:`~envtest.kubelet.PodNetwork`). On the control plane's node (images given, no other
  pods) each pod has a network namespace of its own behind a veth pair, so its processes listen on
  its own ports as on a real node; on a runtime's node the pods share this machine's network, their
  address on the loopback interface (the runtime watcher binds it: ``BIND_ADDRESS``), so they reach
  what a test serves on 127.0.0.1 as it is. The EndpointSlice controller
  publishes those addresses, and the API server (``--enable-aggregator-routing``) calls webhooks
  at them: the path from a ValidatingWebhookConfiguration through the Service to the pod is the
  real one. Pods in namespaces of their own reach each other through Services only (this machine
  does not forward between pods' interfaces). Needs root (``CAP_NET_ADMIN``, ``CAP_SYS_ADMIN``);
  the Makefile leaves the tiers out otherwise.
- **kubelet** (:mod:`envtest.kubelet`): a pod whose containers' images the node knows
  (:class:`~envtest.images.Images`; in the ``kube`` tier, where none are given, the runtime watcher
  runs from the working tree) runs as local processes with its volumes, environment, probes,
  restarts and status; a pod of another image is ``ErrImagePull``, or, where the node is told to
  (``other_pods_run``: runtimes, whose operators' pods no test looks into), Ready without a process.
- **kube-proxy** (:mod:`envtest.proxy`, when ``proxy`` is given): Services' cluster IPs and load
  balancers' addresses on this machine's loopback, forwarding to ready endpoints, and bridges to
  hosts outside the cluster;
- **cluster DNS**: each pod's ``/etc/hosts`` names every Service (``name``, ``name.namespace``,
  ``name.namespace.svc``, ``name.namespace.svc.cluster.local``) and the outside hosts the node is
  given (``hosts``), rewritten as Services come and go.

What it does not: run containers isolated from this machine (they run as root on its file system,
seen through an overlay; ``runAsUser``, ``readOnlyRootFilesystem``, resource limits and seccomp are
checked by the API server's admission, not enforced), pull images (they are built from the
Dockerfiles), enforce NetworkPolicies (no CNI), keep a client's address through a Service (the
userspace proxy), run ``exec`` or gRPC probes (they pass), or serve ``kubectl exec``/``logs``
(no kubelet API; a container's output is in its log file under the node's directory).

Everything but the pod workers and the proxy runs on one thread polling the API server as a node
identity that the audit policy leaves out, so a test counts only its client's requests.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kubernetes
from kubernetes.client.rest import ApiException

from envtest.cluster import RealRuntime
from envtest.images import Image, Images, dev_image
from envtest.kubelet import PodNetwork, PodWorker, _helper_env
from envtest.processes import Child

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[1]
WATCHER_MODULE = "watchers.runtime"
POLL = 0.1  # seconds between looks at the pods
SERVICE_SYNC = 1.0  # seconds between looks at the Services (cluster DNS)
READ_CACHE = 0.5  # seconds a read Secret or ConfigMap is reused by the pods' workers


def runs_runtime_watcher(container: Mapping[str, Any]) -> bool:
    argv = [*(container.get("command") or ()), *(container.get("args") or ())]
    return any(a == "-m" and b == WATCHER_MODULE for a, b in itertools.pairwise(argv))


class PodAddresses:
    """``/32`` addresses on the loopback interface, one per pod, removed again on release."""

    def __init__(self) -> None:
        self.block = PodNetwork.free_block()  # 10.244.<block>.0/24 for this node, held by this process
        self._free = list(range(2, 255))
        self._held: set[str] = set()

    def take(self) -> str:
        while self._free:
            address = f"10.244.{self.block}.{self._free.pop(0)}"
            result = _ip("addr", "add", f"{address}/32", "dev", "lo")
            if result.returncode == 0:
                self._held.add(address)
                return address
            if "File exists" not in result.stderr and "already assigned" not in result.stderr:
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


def _ip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=False)


@dataclass(frozen=True)
class ProxyConfig:
    """What the node's kube-proxy serves besides Services: ``bridges`` (``ADDR:PORT`` ->
    ``127.0.0.1:PORT``, hosts outside the cluster) and the load balancers' address pool."""

    bridges: dict[str, str] = field(default_factory=dict)
    load_balancer_pool: str = ""


class Node:
    """Scheduler, kubelet, pod network, kube-proxy and DNS of one cluster (module docstring)."""

    def __init__(
        self,
        runtime: RealRuntime,
        *,
        name: str = "envtest-node",
        env: Mapping[str, str] | None = None,
        python: str = sys.executable,
        run_watchers: bool = True,
        images: Images | None = None,
        other_pods_run: bool = True,
        hosts: Mapping[str, str] | None = None,
        proxy: ProxyConfig | None = None,
    ) -> None:
        self.runtime = runtime
        self.run_watchers = run_watchers  # False: watcher pods just run too (benchmarks)
        self.name = name
        self.env = dict(env or {})  # applied last to runtime watcher containers (HEARTBEAT_INTERVAL)
        self.python = python
        self.images = images
        self.other_pods_run = other_pods_run
        self.hosts = dict(hosts or {})  # outside names the pods resolve (the world's DNS)
        self.workdir = runtime.workdir / "node"
        self.workdir.mkdir(parents=True, exist_ok=True)
        # Names are the cluster DNS stand-in's (each pod's /etc/hosts) and nobody else's: a name
        # it does not know fails at once, as NXDOMAIN would, instead of waiting for this
        # machine's resolver, which pods cannot reach.
        self.resolv_conf = self.workdir / "resolv.conf"
        self.resolv_conf.write_text("nameserver 127.0.0.1\noptions timeout:1 attempts:1\n")
        # Pods get network namespaces of their own where the node runs images (the control
        # plane's cluster: several pods bind the same ports); a runtime's node shares this machine's.
        self.network = PodNetwork(isolated=images is not None and not other_pods_run)
        self.api = kubernetes.config.new_client_from_config_dict(runtime.node_kubeconfig())
        self.core = kubernetes.client.CoreV1Api(self.api)
        self.stopping = threading.Event()
        self.errors: list[str] = []
        self._workers: dict[str, PodWorker] = {}  # by uid
        self._services: dict[str, str] = {}  # DNS name -> address
        self._service_env: dict[str, str] = {}
        self._last_service_sync = 0.0
        self._reads: dict[tuple[str, str, str], tuple[float, dict | None]] = {}
        self._reads_lock = threading.Lock()
        self._register()
        self.proxy = self._start_proxy(proxy) if proxy is not None else None
        self._thread = threading.Thread(target=self._run, name=f"envtest-node-{runtime.name}", daemon=True)
        self._thread.start()

    # -- for tests ------------------------------------------------------------------------------

    def process(self, namespace: str, name_prefix: str) -> Child | None:
        """The running process (first container) of a pod whose name starts with ``name_prefix``."""
        for worker in list(self._workers.values()):
            state = worker.state
            if state.namespace == namespace and state.name.startswith(name_prefix):
                child = worker.process()
                if child is not None:
                    return child
        return None

    def pods(self, namespace: str, name_prefix: str = "") -> list[PodWorker]:
        return [
            w
            for w in list(self._workers.values())
            if w.state.namespace == namespace and w.state.name.startswith(name_prefix)
        ]

    def close(self) -> None:
        self.stopping.set()
        self._thread.join(10)
        workers = list(self._workers.values())
        for worker in workers:
            worker.deleting.set()
        for worker in workers:
            worker.done.wait(120)
        self._workers.clear()
        if self.proxy is not None:
            self.proxy.stop(10)
        self.api.close()

    # -- what the pod workers ask ----------------------------------------------------------------

    def image(self, ref: str, container: Mapping[str, Any] | None = None) -> Image | None:
        if self.images is not None and (found := self.images.get(ref)) is not None:
            return found
        if (
            self.images is None
            and container is not None
            and self.run_watchers
            and runs_runtime_watcher(container)
        ):
            return dev_image(ref, ROOT)
        return None

    def placeholder(self, pod: Mapping[str, Any]) -> bool:
        """Whether a pod runs without a process (Ready at once): none of its images is known and
        the node lets such pods run (runtimes' operator pods, watchers in benchmarks)."""
        containers = [*(pod["spec"].get("initContainers") or ()), *pod["spec"]["containers"]]
        return self.other_pods_run and not any(self.image(c.get("image", ""), c) for c in containers)

    def read(self, plural: str, namespace: str, name: str) -> dict | None:
        key = (plural, namespace, name)
        with self._reads_lock:
            cached = self._reads.get(key)
            if cached is not None and time.monotonic() - cached[0] < READ_CACHE:
                return cached[1]
        path = f"/api/v1/namespaces/{namespace}/{plural}/{name}"
        try:
            found = self._get(path)
        except ApiException as exc:
            if exc.status != 404:
                raise
            found = None
        with self._reads_lock:
            self._reads[key] = (time.monotonic(), found)
        return found

    def create_token(self, namespace: str, account: str, spec: dict[str, Any]) -> dict[str, Any]:
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}
        return self.api.call_api(
            f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token",
            "POST",
            body=body,
            header_params={"Content-Type": "application/json", "Accept": "application/json"},
            auth_settings=["BearerToken"],
            _preload_content=False,
            _return_http_data_only=True,
        ).json()

    def patch_status(self, namespace: str, name: str, body: dict[str, Any]) -> bool:
        try:
            self.core.patch_namespaced_pod_status(name, namespace, body, _preload_content=False)
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def service_environment(self) -> dict[str, str]:
        """What a kubelet gives every container: where the cluster's API server is."""
        return dict(self._service_env)

    def extra_env(self, container: Mapping[str, Any], address: str) -> dict[str, str]:
        """What the node adds to a runtime watcher's environment: the node's ``env``, and where
        pods share this machine's network, the pod's address to bind (``BIND_ADDRESS``)."""
        if not runs_runtime_watcher(container):
            return {}
        shared = {} if self.network.isolated else {"BIND_ADDRESS": address}
        return {**shared, **self.env}

    def hosts_file(self, path: Path, namespace: str, pod: str) -> None:
        """The pod's ``/etc/hosts`` (written in place: it is bound into the container)."""
        lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]
        for name, address in sorted(self._services.items()):
            short = name.removesuffix(f".{namespace}")
            names = [name] if short == name else [name, short]
            lines.append(f"{address}\t{' '.join(names)}")
        lines += [f"{address}\t{name}" for name, address in sorted(self.hosts.items())]
        text = "\n".join(lines) + "\n"
        if path.exists() and path.read_text() == text:
            return
        with open(path, "a+") as handle:
            handle.seek(0)
            handle.truncate()
            handle.write(text)

    # -- the loop -------------------------------------------------------------------------------

    def _get(self, path: str) -> dict[str, Any]:
        return self.api.call_api(
            path,
            "GET",
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
            _preload_content=False,
            _return_http_data_only=True,
        ).json()

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
                "addresses": [
                    {"type": "Hostname", "address": self.name},
                    {"type": "InternalIP", "address": self.network.gateway},
                ],
                "capacity": {"cpu": "8", "memory": "16Gi", "pods": "110"},
                "allocatable": {"cpu": "8", "memory": "16Gi", "pods": "110"},
            }
        }
        self.core.patch_node_status(self.name, status)

    def _start_proxy(self, config: ProxyConfig) -> Child:
        kubeconfig = self.workdir / "proxy.kubeconfig"
        kubeconfig.write_text(json.dumps(self.runtime.node_kubeconfig()))
        kubeconfig.chmod(0o600)
        ready = self.workdir / "proxy.ready"
        settings = {
            "kubeconfig": str(kubeconfig),
            "apiserver": f"127.0.0.1:{self.runtime.port}",
            "bridges": config.bridges,
            # (the node's pod block is held across processes: so is the pool named after it)
            "load_balancer_pool": config.load_balancer_pool or f"10.250.{self.network.block}.0/26",
            "ready_file": str(ready),
        }
        path = self.workdir / "proxy.json"
        path.write_text(json.dumps(settings))
        child = Child(
            f"kube-proxy {self.runtime.name}",
            [self.python, "-m", "envtest.proxy", str(path)],
            log=self.workdir / "proxy.log",
            env={**_helper_env(), "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
            cwd=ROOT,
        )
        child.wait_until(ready.exists, timeout=60, what="kube-proxy ready")
        return child

    def _run(self) -> None:
        while not self.stopping.is_set():
            try:
                self._sync()
            except Exception as exc:  # the node keeps going, as a kubelet would
                if not self.stopping.is_set():
                    self.errors.append(f"{type(exc).__name__}: {exc}")
                    log.warning("envtest node %s: %s", self.runtime.name, exc)
            self.stopping.wait(POLL)

    def _sync(self) -> None:
        if time.monotonic() - self._last_service_sync > SERVICE_SYNC:
            self._last_service_sync = time.monotonic()
            self._sync_services()
        seen = set()
        for pod in self.core.list_pod_for_all_namespaces(_preload_content=False).json()["items"]:
            meta, spec = pod["metadata"], pod["spec"]
            seen.add(meta["uid"])
            worker = self._workers.get(meta["uid"])
            if not spec.get("nodeName"):
                if not meta.get("deletionTimestamp"):
                    self._bind(pod)
                else:
                    self._confirm_deletion(pod)
            elif spec["nodeName"] != self.name:
                continue
            elif worker is None:
                if meta.get("deletionTimestamp"):
                    self._confirm_deletion(pod)
                elif (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
                    self._workers[meta["uid"]] = PodWorker(self, pod)
            else:
                worker.update(pod)
                if meta.get("deletionTimestamp") and worker.done.is_set():
                    self._confirm_deletion(pod)
        for uid in list(self._workers):
            if uid not in seen:  # removed without us (grace period 0, or the whole namespace)
                worker = self._workers.pop(uid)
                worker.gone.set()

    def _sync_services(self) -> None:
        names: dict[str, str] = {}
        for service in self.core.list_service_for_all_namespaces(_preload_content=False).json()["items"]:
            meta, spec = service["metadata"], service["spec"]
            address = spec.get("clusterIP")
            if spec.get("type") == "ExternalName":
                address = self.hosts.get(spec.get("externalName", ""))
            if not address or address == "None":
                continue
            base = f"{meta['name']}.{meta['namespace']}"
            for name in (base, f"{base}.svc", f"{base}.svc.cluster.local"):
                names[name] = address
            if (meta["namespace"], meta["name"]) == ("default", "kubernetes"):
                self._service_env = {
                    "KUBERNETES_SERVICE_HOST": address,
                    "KUBERNETES_SERVICE_PORT": "443",
                    "KUBERNETES_PORT": f"tcp://{address}:443",
                }
        self._services = names

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

    def _confirm_deletion(self, pod: dict[str, Any]) -> None:
        """The kubelet's last word on a pod being deleted: its containers stopped, gone now."""
        meta = pod["metadata"]
        self._workers.pop(meta["uid"], None)
        body = {"gracePeriodSeconds": 0, "preconditions": {"uid": meta["uid"]}}
        with contextlib.suppress(ApiException):
            self.core.delete_namespaced_pod(meta["name"], meta["namespace"], body=body)


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
