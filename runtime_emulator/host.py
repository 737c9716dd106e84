"""Many emulated runtimes in one process: one event loop in a background thread, one port each.

Synchronous code (tests, benchmarks, a Django management command) drives everything through
:meth:`EmulatorHost.run`; the emulators themselves only ever run on the host's loop, which also
owns the single pooled HTTP session used to call admission webhooks.

    with EmulatorHost() as host:
        runtime = host.create("runtime-1")
        api = kubernetes.client.CoreV1Api(new_client_from_config_dict(runtime.kubeconfig()))
"""

from __future__ import annotations

import asyncio
import itertools
import os
import ssl
import tempfile
import threading
from collections.abc import Coroutine, Iterable, Iterator, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TypeVar

from runtime_emulator import catalog
from runtime_emulator.admission import WebhookTransport
from runtime_emulator.emulator import RuntimeEmulator
from runtime_emulator.workloads import Kubelet

T = TypeVar("T")
DEFAULT_NAMESPACES = ("default", "kube-system")


@dataclass(frozen=True, slots=True)
class ServerTLS:
    """Serving certificate of an emulator, and what its clients must trust."""

    cert_pem: bytes
    key_pem: bytes
    ca_pem: bytes | None = None  # the issuing CA; defaults to the certificate itself (self-signed)
    server_name: str = "localhost"  # the host name clients connect to; must be in the certificate


class EmulatorHost:
    """Runs emulators on a private event loop thread; start/stop them from synchronous code."""

    def __init__(
        self,
        *,
        bind: str = "127.0.0.1",
        kubelet: Kubelet | None = None,
        keepalive_timeout: float = 3630,
    ) -> None:
        self.bind = bind
        self.kubelet = kubelet  # installed into every emulator created afterwards
        # Idle client connections are closed after this long: thousands of runtimes on one host
        # would otherwise hold one descriptor per runtime and client for ever (benchmarks lower it).
        self.keepalive_timeout = keepalive_timeout
        self.transport = WebhookTransport()
        self._emulators: dict[str, RuntimeEmulator] = {}
        self._numbers = itertools.count(1)
        self._contexts: dict[tuple[bytes, bytes], ssl.SSLContext] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        """Start the loop thread (idempotent)."""
        if self._loop is not None:
            return
        loop = asyncio.new_event_loop()
        ready = threading.Event()
        loop.call_soon(ready.set)
        self._thread = threading.Thread(target=loop.run_forever, name="emulator-host", daemon=True)
        self._loop = loop
        self._thread.start()
        ready.wait()

    def stop(self) -> None:
        """Close every emulator and the webhook session, then stop the loop thread."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        self.run(self._shutdown())
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()
        self._loop = self._thread = None

    async def _shutdown(self) -> None:
        await asyncio.gather(*(emulator.close() for emulator in self._emulators.values()))
        self._emulators.clear()
        await self.transport.close()

    def __enter__(self) -> EmulatorHost:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The host's event loop (for ``asyncio.run_coroutine_threadsafe`` and friends)."""
        if self._loop is None:
            raise RuntimeError("the emulator host is not started")
        return self._loop

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = 60) -> T:
        """Run a coroutine on the host's loop and wait for its result (not from the loop itself)."""
        loop = self.loop
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            coro.close()
            raise RuntimeError("EmulatorHost.run() was called on the host's own loop; await instead")
        return asyncio.run_coroutine_threadsafe(coro, loop).result(timeout)

    # -- emulators -------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._emulators)

    def __iter__(self) -> Iterator[RuntimeEmulator]:
        return iter(list(self._emulators.values()))

    def __getitem__(self, name: str) -> RuntimeEmulator:
        return self._emulators[name]

    def create(
        self,
        name: str | None = None,
        *,
        tls: ServerTLS | None = None,
        token: str | None = None,
        namespaces: Iterable[str] = DEFAULT_NAMESPACES,
        crds: Iterable[Mapping[str, Any]] = (),
    ) -> RuntimeEmulator:
        """Start one emulator on a free loopback port, seeded with namespaces and CRDs."""
        name = name or f"runtime-{next(self._numbers)}"
        return self._start([name], tls=tls, token=token, namespaces=namespaces, crds=crds)[0]

    def create_many(
        self,
        count: int,
        *,
        prefix: str = "runtime",
        tls: ServerTLS | None = None,
        token: str | None = None,
        namespaces: Iterable[str] = DEFAULT_NAMESPACES,
        crds: Iterable[Mapping[str, Any]] = (),
    ) -> list[RuntimeEmulator]:
        """Start ``count`` emulators (named ``<prefix>-<n>``) in one hop to the loop, as benchmarks do."""
        names = [f"{prefix}-{next(self._numbers)}" for _ in range(count)]
        return self._start(names, tls=tls, token=token, namespaces=namespaces, crds=crds)

    def _start(
        self,
        names: list[str],
        *,
        tls: ServerTLS | None,
        token: str | None,
        namespaces: Iterable[str],
        crds: Iterable[Mapping[str, Any]],
    ) -> list[RuntimeEmulator]:
        seeds = [(catalog.NAMESPACES, {"metadata": {"name": ns}}) for ns in namespaces]
        # Seeded CRDs share their (possibly large) spec between all emulators: stored objects are immutable.
        seeds += [(catalog.CRDS, dict(crd)) for crd in crds]

        async def start_all() -> list[RuntimeEmulator]:
            started = []
            for name in names:
                if name in self._emulators:
                    raise ValueError(f"an emulator named {name!r} already exists")
                emulator = RuntimeEmulator(name=name, tls=tls, host=self, transport=self.transport)
                emulator.keepalive_timeout = self.keepalive_timeout
                if token is not None:
                    emulator.token = token
                emulator.kubelet = self.kubelet
                for rtype, body in seeds:
                    emulator.engine.seed(rtype, {**body, "metadata": dict(body["metadata"])})
                await self.serve(emulator)
                self._emulators[name] = emulator
                started.append(emulator)
            return started

        return self.run(start_all(), timeout=None)

    async def serve(self, emulator: RuntimeEmulator) -> None:
        """(Re)start listening for one emulator, with its TLS settings."""
        await emulator.listen(self.bind, self._ssl_context(emulator.tls))

    def set_latency(self, seconds: float, emulators: Iterable[RuntimeEmulator] | None = None) -> None:
        """Add ``seconds`` before every answer of these emulators (all by default): a network
        round trip to a runtime in another region, or a runtime that answers late (or, with a
        very large value, never)."""
        for emulator in self if emulators is None else emulators:
            emulator.faults.latency = seconds

    def remove(self, emulator: RuntimeEmulator) -> None:
        """Stop an emulator and forget it; its port refuses connections afterwards."""
        self.run(emulator.close())
        self._emulators.pop(emulator.name, None)

    def _ssl_context(self, tls: ServerTLS | None) -> ssl.SSLContext | None:
        """One server context per distinct certificate (thousands of runtimes may share one)."""
        if tls is None:
            return None
        key = (tls.cert_pem, tls.key_pem)
        context = self._contexts.get(key)
        if context is None:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            with tempfile.TemporaryDirectory() as tmp:
                cert, private = os.path.join(tmp, "tls.crt"), os.path.join(tmp, "tls.key")
                with open(cert, "wb") as f:
                    f.write(tls.cert_pem)
                with open(private, "wb") as f:
                    f.write(tls.key_pem)
                context.load_cert_chain(cert, private)
            self._contexts[key] = context
        return context
