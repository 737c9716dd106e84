"""Loopback benchmark of the runtime watcher (not collected by pytest).

    .venv/bin/python -m tests.watchers.runtime.bench [--seconds 3] [--events 2000]

Measures (1) admission reviews/s over keep-alive TLS 1.3 connections, for 1 and 4 client
connections, and (2) WatchEvents/s delivered to the fake listener with the pooled connection vs.
a new TLS handshake per event (``KCP_KEEP_ALIVE=false``, upstream's behaviour). Both ends are
Python ``http.server`` on one machine, so the numbers are relative, not capacity planning.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from pki.crypto import certificate_to_pem
from tests.watchers.runtime.conftest import make_config
from tests.watchers.runtime.fake_kcp import FakeListener
from tests.watchers.runtime.support import TlsFiles, WebhookClient, kyma, make_pki, review
from watchers.runtime import GroupVersionKind, WatcherServer, WatchEvent
from watchers.runtime.logs import setup_logging
from watchers.runtime.sendqueue import QueuedEvent


def _client_process(port: int, ca_pem: bytes, seconds: float, start_at: float) -> int:
    """One keep-alive client in its own process, so it does not share the watcher's GIL."""
    body = review("UPDATE", kyma("bench", spec={"a": 1}), kyma("bench", spec={"a": 1}))  # no event
    client = WebhookClient(port, ca_pem)
    client.review("kyma", body)  # handshake outside the measured window
    time.sleep(max(0.0, start_at - time.time()))
    stop, count = time.time() + seconds, 0
    while time.time() < stop:
        client.review("kyma", body)
        count += 1
    client.close()
    return count


def admissions_per_second(server: WatcherServer, ca_pem: bytes, connections: int, seconds: float) -> float:
    start_at = time.time() + 1.5  # let the spawned interpreters import first
    with ProcessPoolExecutor(connections, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = [
            pool.submit(_client_process, server.webhook_port, ca_pem, seconds, start_at)
            for _ in range(connections)
        ]
        return sum(f.result() for f in futures) / seconds


def events_per_second(server: WatcherServer, listener: FakeListener, events: int) -> tuple[float, int]:
    listener.down()
    assert server.sender is not None
    gvk = GroupVersionKind("operator.kyma-project.io", "v1beta2", "Kyma")
    for i in range(events):
        server.sender.submit(QueuedEvent("kyma", WatchEvent("kyma-system", f"e-{i}", gvk)))
    before = listener.connections
    listener.up()
    deadline = time.monotonic() + 120
    while len(listener.events()) < events and time.monotonic() < deadline:
        time.sleep(0.01)
    delivered = listener.events()
    span = delivered[-1].at - delivered[0].at
    return (len(delivered) - 1) / span, listener.connections - before


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--events", type=int, default=2000)
    args = parser.parse_args()
    # Production logging (one JSON line per admission) included in the cost, written to /dev/null.
    devnull = open(os.devnull, "w")  # noqa: SIM115 - lives as long as the process
    setup_logging("INFO", stream=devnull)
    pki = make_pki()
    ca_pem = certificate_to_pem(pki.ca_old.certificate)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        files = TlsFiles.write(root / "tls", pki.bundle_pem, pki.runtime)
        for keep_alive in (True, False):
            listener = FakeListener(root / f"listener-{keep_alive}", pki.listener, ca_pem).start()
            server = WatcherServer(
                make_config(files, listener.addr, kcp_keep_alive=keep_alive, send_queue_size=args.events + 10)
            )
            server.start()
            try:
                if keep_alive:
                    for connections in (1, 4):
                        rate = admissions_per_second(server, ca_pem, connections, args.seconds)
                        print(f"admission reviews/s, {connections} keep-alive connection(s): {rate:,.0f}")
                rate, conns = events_per_second(server, listener, args.events)
                label = "pooled keep-alive connection" if keep_alive else "new TLS handshake per event"
                print(f"events/s delivered, {label}: {rate:,.0f} ({conns} TLS connections)")
            finally:
                server.stop(flush_timeout=0.5)
                listener.down()


if __name__ == "__main__":
    main()
