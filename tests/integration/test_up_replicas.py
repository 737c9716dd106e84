"""``manage.py up --replicas 2``: two of every role on one machine, web and listener on ports of
their own, the beats electing one; stopping ``up`` stops all of them."""

from __future__ import annotations

import contextlib
import signal
import socket
import sys
import time

import pytest
import requests
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from controlplane.beat import LEASE_NAME
from controlplane.leases import lease_current, lease_is_live
from pki import services as pki
from tests.support.processes import Process, process_env

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def free_pair() -> int:
    """A port whose successor is free too (the second replica listens there)."""
    for _ in range(50):
        with socket.socket() as first:
            first.bind(("127.0.0.1", 0))
            port = first.getsockname()[1]
            with socket.socket() as second, contextlib.suppress(OSError):
                second.bind(("127.0.0.1", port + 1))
                return port
    raise RuntimeError("no two free ports in a row")


def answers(url: str) -> bool:
    try:
        return requests.get(url, timeout=2).status_code == 200
    except requests.RequestException:
        return False


def test_given_replicas_2_then_two_of_every_role_run_and_stop_together():
    pki.ca_bootstrap()
    web, listener, metrics = free_pair(), free_pair(), free_pair()
    env = process_env(
        WEB_BIND=f"127.0.0.1:{web}",
        LISTENER_BIND=f"127.0.0.1:{listener}",
        LISTENER_METRICS_BIND=f"127.0.0.1:{metrics}",
        WORKER_CONCURRENCY="2",
        # (one gunicorn worker per server: each loads the whole app, and who owns what is the same)
        WEB_WORKERS="1",
        LISTENER_WORKERS="1",
    )
    up = Process("up", [sys.executable, "manage.py", "up", "--no-demo", "--replicas", "2"], env, keep=20_000)
    try:
        for url in (
            f"http://127.0.0.1:{web}/healthz",
            f"http://127.0.0.1:{web + 1}/healthz",
            f"http://127.0.0.1:{metrics}/healthz",
            f"http://127.0.0.1:{metrics + 1}/healthz",
        ):
            # (a generous wait: eight Django processes boot at once on two cores)
            up.wait_for(lambda url=url: answers(url), 180, f"{url} answering")
        up.wait_for(
            lambda: (lease := lease_current(LEASE_NAME)) is not None and lease_is_live(lease, timezone.now()),
            60,
            "a beat leading",
        )
        up.wait_for(lambda: "standing by; beat" in up.output(), 30, "the other beat standing by")
        for name in (
            "web-1",
            "web-2",
            "listener-1",
            "listener-2",
            "worker-1",
            "worker-2",
            "beat-1",
            "beat-2",
        ):
            up.wait_for(
                lambda name=name: any(line.split(" |")[0].strip() == name for line in list(up.lines)),
                60,
                f"output of {name}",
            )
        up.wait_for(lambda: up.output().count(" ready.") >= 2, 60, "both workers ready")
        assert "replicas   web x2, listener x2, worker x2, beat x2" in up.output()
        up.signal(signal.SIGTERM)
        assert up.proc.wait(30) == 0, up.output()
    finally:
        up.stop()
    deadline = time.monotonic() + 10
    while any(answers(f"http://127.0.0.1:{port}/healthz") for port in (web, web + 1)):
        assert time.monotonic() < deadline, "a web replica outlived up"
        time.sleep(0.2)


@pytest.mark.parametrize("scale", ["cron=2", "worker=0", "worker"])
def test_given_a_bad_scale_then_one_line_says_what_is_allowed(scale):
    with pytest.raises(
        CommandError, match="--scale takes ROLE=N with ROLE one of web, listener, worker, beat"
    ):
        call_command("up", "--no-demo", "--scale", scale)
