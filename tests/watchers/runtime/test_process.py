"""``python -m watchers.runtime`` as a real process: serve, then SIGTERM/SIGINT -> flush -> exit 0."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

import pytest

from pki.crypto import certificate_to_pem
from tests.watchers.runtime.support import WebhookClient, create, wait_until
from tests.watchers.runtime.test_config import REPO, free_port


def start_process(tls_files, listener, **extra: str) -> tuple[subprocess.Popen[str], int, int]:
    webhook_port = free_port()
    metrics_port = free_port()
    while metrics_port == webhook_port:  # two calls may get the same free port back
        metrics_port = free_port()
    env = {
        "PATH": os.environ.get("PATH", ""),
        "PYTHONPATH": str(REPO),
        "CA_CERT": str(tls_files.ca),
        "TLS_CERT": str(tls_files.cert),
        "TLS_KEY": str(tls_files.key),
        "KCP_ADDR": listener.addr,
        "WEBHOOK_PORT": str(webhook_port),
        "METRICS_PORT": str(metrics_port),
        "BIND_ADDRESS": "127.0.0.1",
        "HEARTBEAT_INTERVAL": "0",
        "BACKOFF_INITIAL": "0.05",
        "BACKOFF_MAX": "0.2",
        **extra,
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "watchers.runtime"],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )

    def healthy() -> bool:
        if process.poll() is not None:
            raise AssertionError(f"watcher exited early: {process.communicate()[1]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/healthz", timeout=1) as response:
                return response.status == 200
        except OSError:
            return False

    wait_until(healthy, timeout=10, interval=0.05)
    return process, webhook_port, metrics_port


def log_lines(stderr: str) -> list[dict]:
    return [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signal_flushes_queue_and_exits_zero(tls_files, listener, pki, signum):
    listener.mode = "fail"  # the event is still queued when the signal arrives
    process, webhook_port, _ = start_process(tls_files, listener, SHUTDOWN_TIMEOUT="5")
    try:
        client = WebhookClient(webhook_port, certificate_to_pem(pki.ca_old.certificate))
        assert (
            client.review("kyma", create("flushed"))["response"]["status"]["message"]
            == "kcp request succeeded"
        )
        client.close()
        wait_until(lambda: len(listener.events()) >= 1)
        process.send_signal(signum)
        time.sleep(0.2)
        listener.mode = "ok"  # the control plane recovers during the flush window
        _, stderr = process.communicate(timeout=10)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, stderr
    listener.wait_for_event("flushed")
    assert listener.events()[-1].json["watched"]["Name"] == "flushed"
    lines = log_lines(stderr)
    assert [line["dropped"] for line in lines if line["msg"] == "runtime watcher stopped"] == [0]
    admissions = [line for line in lines if line["msg"] == "admission reviewed"]
    assert [(a["message"], a["name"], a["operation"]) for a in admissions] == [
        ("kcp request succeeded", "flushed", "CREATE")
    ]
    assert "BEGIN" not in stderr


def test_flush_is_bounded_when_control_plane_stays_down(tls_files, listener, pki):
    listener.down()
    process, webhook_port, _ = start_process(tls_files, listener, SHUTDOWN_TIMEOUT="0.5")
    try:
        client = WebhookClient(webhook_port, certificate_to_pem(pki.ca_old.certificate))
        client.review("kyma", create("lost"))
        client.close()
        started = time.monotonic()
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=10)
        elapsed = time.monotonic() - started
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, stderr
    assert elapsed < 4.0
    lines = log_lines(stderr)
    assert [line["dropped"] for line in lines if line["msg"] == "events not delivered before shutdown"] == [1]
