"""kube-proxy of the node stand-in, in userspace: ``python -m envtest.proxy CONFIG.json``.

A process of its own, as kube-proxy is, that reads the cluster's Services and EndpointSlices from
the API server and makes them reachable from the pods and from this machine:

- **ClusterIP**: each Service's cluster IP is added to the loopback interface and every port of it
  listens there; a connection goes to a ready endpoint of that port, chosen at random, and when it
  cannot be connected to, to the next one (the userspace proxy mode kube-proxy had): a pod that
  stopped listening costs a retry, not an error. With no ready endpoint, the endpoints still
  serving while they terminate are used, as kube-proxy does; with none at all the connection is
  closed at once.
- **LoadBalancer**: a Service of that type gets an address from ``load_balancer_pool`` (what a
  cloud's or MetalLB's controller would give it) written into its status, and listens there too.
- ``default/kubernetes``: the API server, which is not a pod (``--endpoint-reconciler-type=none``).
- **bridges**: addresses standing for hosts outside the cluster (the machine's PostgreSQL and
  Redis, the runtimes' API servers), each forwarding to a port on this machine's loopback; a
  Service whose EndpointSlice names such an address reaches the host behind it directly.

What it cannot do: keep the client's address (the backend sees this machine's), or enforce
NetworkPolicies. Config: ``{"kubeconfig", "apiserver": "HOST:PORT", "bridges": {"ADDR:PORT":
"127.0.0.1:PORT"}, "load_balancer_pool": "CIDR", "log": PATH}``.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import logging
import random
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import kubernetes

log = logging.getLogger("envtest.proxy")
POLL = 0.3  # seconds between looks at Services and EndpointSlices
CONNECT_TIMEOUT = 2.0
Address = tuple[str, int]


def _ip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=False)


def _split(value: str) -> Address:
    host, _, port = value.rpartition(":")
    return host, int(port)


class Addresses:
    """``/32`` addresses on the loopback interface, added once, removed at the end."""

    def __init__(self) -> None:
        self.held: set[str] = set()

    def ensure(self, address: str) -> None:
        if address in self.held:
            return
        result = _ip("addr", "add", f"{address}/32", "dev", "lo")
        if result.returncode != 0 and "File exists" not in result.stderr:
            raise RuntimeError(f"cannot add {address} to lo: {result.stderr.strip()}")
        self.held.add(address)

    def release_all(self) -> None:
        for address in self.held:
            _ip("addr", "del", f"{address}/32", "dev", "lo")
        self.held.clear()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)


def _relay(client: socket.socket, upstream: socket.socket) -> None:
    back = threading.Thread(target=_pump, args=(upstream, client), daemon=True)
    back.start()
    _pump(client, upstream)
    back.join()
    for end in (client, upstream):
        with contextlib.suppress(OSError):
            end.close()


class Listener:
    """One listening address; each connection goes to one of ``backends()`` (tried in turn)."""

    def __init__(self, address: Address, proxy: Proxy, key: tuple[str, str, str]) -> None:
        self.address, self.proxy, self.key = address, proxy, key
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(address)
        self.sock.listen(512)
        self.open = True
        threading.Thread(target=self._accept, name=f"listen-{address}", daemon=True).start()

    def close(self) -> None:
        self.open = False
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self.sock.close()

    def _accept(self) -> None:
        while self.open:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        for backend in self.proxy.backends(self.key):
            try:
                upstream = socket.create_connection(backend, timeout=CONNECT_TIMEOUT)
            except OSError:
                continue
            upstream.settimeout(None)
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            upstream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            _relay(client, upstream)
            return
        # No endpoint: refuse the way a REJECT rule would look to the client (a reset).
        with contextlib.suppress(OSError):
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            client.close()


class Proxy:
    def __init__(self, config: dict[str, Any]) -> None:
        self.api = kubernetes.config.new_client_from_config_dict(
            json.loads(Path(config["kubeconfig"]).read_text())
        )
        self.core = kubernetes.client.CoreV1Api(self.api)
        self.apiserver = _split(config["apiserver"])
        self.bridges = {_split(k): _split(v) for k, v in (config.get("bridges") or {}).items()}
        self.pool = list(ipaddress.ip_network(config.get("load_balancer_pool") or "10.250.255.0/28").hosts())
        self.addresses = Addresses()
        self.listeners: dict[tuple[str, str, str, Address], Listener] = {}
        self.routes: dict[tuple[str, str, str], list[Address]] = {}  # (ns, service, port name) -> endpoints
        self.fallback: dict[tuple[str, str, str], list[Address]] = {}
        self.lock = threading.Lock()
        self.stop = threading.Event()
        for bridge, target in self.bridges.items():
            self.addresses.ensure(bridge[0])
            key = ("", "bridge", f"{bridge[0]}:{bridge[1]}")
            self.routes[key] = [target]
            self.listeners[(*key, bridge)] = Listener(bridge, self, key)

    # -- routing -------------------------------------------------------------------------------

    def backends(self, key: tuple[str, str, str]) -> list[Address]:
        with self.lock:
            found = list(self.routes.get(key) or self.fallback.get(key) or ())
        random.shuffle(found)
        return [self.bridges.get(address, address) for address in found]

    def sync(self) -> None:
        services = self.core.list_service_for_all_namespaces(_preload_content=False).json()["items"]
        slices = self.api.call_api(
            "/apis/discovery.k8s.io/v1/endpointslices",
            "GET",
            auth_settings=["BearerToken"],
            _preload_content=False,
            _return_http_data_only=True,
        ).json()["items"]
        routes, fallback = self._endpoints(slices)
        wanted: dict[tuple[str, str, str, Address], None] = {}
        for service in services:
            meta, spec = service["metadata"], service["spec"]
            namespace, name = meta["namespace"], meta["name"]
            addresses = [a for a in [spec.get("clusterIP")] if a and a != "None"]
            if spec.get("type") == "LoadBalancer":
                addresses += self._load_balancer(service)
            for port in spec.get("ports") or ():
                key = (namespace, name, port.get("name") or "")
                if (namespace, name) == ("default", "kubernetes"):
                    routes[key] = [self.apiserver]
                for address in addresses:
                    wanted[(*key, (address, int(port["port"])))] = None
        with self.lock:
            self.routes = {**routes, **{k: v for k, v in self.routes.items() if k[1] == "bridge"}}
            self.fallback = fallback
        for listener_key in list(self.listeners):
            if listener_key[1] != "bridge" and listener_key not in wanted:
                self.listeners.pop(listener_key).close()
        for listener_key in wanted:
            if listener_key not in self.listeners:
                address = listener_key[3]
                self.addresses.ensure(address[0])
                self.listeners[listener_key] = Listener(address, self, listener_key[:3])

    @staticmethod
    def _endpoints(slices: Iterable[dict[str, Any]]) -> tuple[dict, dict]:
        ready: dict[tuple[str, str, str], list[Address]] = {}
        serving: dict[tuple[str, str, str], list[Address]] = {}
        for found in slices:
            meta = found["metadata"]
            service = (meta.get("labels") or {}).get("kubernetes.io/service-name")
            if not service or found.get("addressType") != "IPv4":
                continue
            for port in found.get("ports") or ():
                key = (meta["namespace"], service, port.get("name") or "")
                for endpoint in found.get("endpoints") or ():
                    conditions = endpoint.get("conditions") or {}
                    targets = [(a, int(port["port"])) for a in endpoint.get("addresses") or ()]
                    if conditions.get("ready", True):
                        ready.setdefault(key, []).extend(targets)
                    elif conditions.get("serving"):
                        serving.setdefault(key, []).extend(targets)
        return ready, serving

    def _load_balancer(self, service: dict[str, Any]) -> list[str]:
        ingress = ((service.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
        held = [i["ip"] for i in ingress if i.get("ip")]
        if held:
            return held
        taken = set()
        with contextlib.suppress(Exception):
            for other in self.core.list_service_for_all_namespaces(_preload_content=False).json()["items"]:
                for i in ((other.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []:
                    taken.add(i.get("ip"))
        address = str(next(a for a in self.pool if str(a) not in taken))
        meta = service["metadata"]
        self.core.patch_namespaced_service_status(
            meta["name"], meta["namespace"], {"status": {"loadBalancer": {"ingress": [{"ip": address}]}}}
        )
        return [address]

    # -- the loop ------------------------------------------------------------------------------

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                self.sync()
            except Exception as exc:  # the proxy keeps going, as kube-proxy would
                log.warning("sync failed: %s", exc)
            self.stop.wait(POLL)
        for listener in self.listeners.values():
            listener.close()
        self.addresses.release_all()


def main() -> None:
    config = json.loads(Path(sys.argv[1]).read_text())
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    proxy = Proxy(config)
    signal.signal(signal.SIGTERM, lambda *_: proxy.stop.set())
    signal.signal(signal.SIGINT, lambda *_: proxy.stop.set())
    ready = config.get("ready_file")
    proxy.sync()
    if ready:
        Path(ready).write_text("ready\n")
    proxy.run()


if __name__ == "__main__":
    main()
