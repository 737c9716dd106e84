"""The module loop with every part real and no Watcher written by anyone:

a user edits the keda CR in an emulated runtime → the module-CR webhook every runtime gets → our
runtime watcher process → listener (mutual TLS) → worker reconcile → ModuleConfig → the web role's
watch → the SDK's example manager (its own process) → SyncResource → worker → the Deployment and
ConfigMap in that runtime. The manager is then stopped, the CR edited meanwhile, and the restarted
manager resumes from its state file.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.contrib.auth.models import User

from fleet.models import Kyma, ModuleConfig
from kernel.api_tokens import api_token_create
from pki import services as pki
from runtime_emulator.kubelet import ProcessKubelet
from tests.support.listener import start_listener
from tests.support.processes import ROOT, Process, eventually, process_env, start_web, start_worker
from tests.support.runtimes import connected_kyma, keda_module
from watchers.models import Watcher

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def control_plane() -> Iterator[dict]:
    pki.ca_bootstrap()
    listener = start_listener()
    started = [listener.process]
    try:
        started.append(
            start_worker(
                concurrency=2, WATCHER_KCP_ADDR=f"localhost:{listener.port}", WATCHER_HEARTBEAT_INTERVAL="1"
            )
        )
        web, url = start_web(MODULECONFIG_WATCH_BOOKMARK_INTERVAL="1")
        started.append(web)
        yield {"url": url, "processes": started}
    finally:
        for process in reversed(started):
            process.stop()


@pytest.fixture
def kubelet(emulator_host) -> Iterator[ProcessKubelet]:
    kubelet = ProcessKubelet(restart_backoff=(0.2, 1))
    yield kubelet
    emulator_host.run(kubelet.aclose())


def start_manager(url: str, key: str, state: Path) -> Process:
    env = process_env(
        KCP_API=f"{url}/api/v1", KCP_TOKEN=key, STATE_FILE=str(state), PYTHONPATH=str(ROOT / "sdk")
    )
    return Process("keda-manager", [sys.executable, str(ROOT / "sdk/examples/keda_manager.py")], env)


def saved_revision(state: Path) -> int:
    return json.loads(state.read_text())["revision"] if state.exists() else 0


def replicas(runtime) -> int | None:
    deployment = runtime.get_object("Deployment", "keda-operator", "kyma-system")
    return deployment and deployment["spec"]["replicas"]


def test_a_module_cr_edit_reaches_the_sdk_manager_and_its_manifests_the_runtime(
    control_plane, kubelet, runtimes, tmp_path
):
    keda_module()
    runtime = runtimes()
    runtime.kubelet = kubelet
    kyma = connected_kyma(runtime)
    key = api_token_create(user=User.objects.create_superuser("keda-team", password="x"), name="keda")[1]
    state = tmp_path / "keda.state"
    manager = start_manager(control_plane["url"], key, state)
    watching = [manager, *control_plane["processes"]]
    try:
        # The default CR's spec (replicas 1) reaches the manager, whose manifests reach the runtime.
        eventually(lambda: replicas(runtime) == 1, "the manager's Deployment in the runtime", watching, 60)
        config = runtime.get_object("ConfigMap", "keda-config", "kyma-system")
        assert config["data"]["replicas"] == "1"
        eventually(
            lambda: ModuleConfig.objects.get(kyma=kyma).status.get("state") == "Ready",
            "the manager's status report",
            watching,
        )
        assert not Watcher.objects.exists()  # nobody wrote a Watcher for keda (or for anything)
        eventually(  # the runtime watcher runs (its webhook calls before that are ignored)
            lambda: Kyma.objects.filter(pk=kyma.pk, watcher_contact__last_seen_at__isnull=False).exists(),
            "the runtime watcher's first heartbeat",
            watching,
        )

        # A user edits the module CR in the runtime: the manifest follows.
        runtime.edit_as_user("Keda", "default", lambda obj: obj["spec"].update(replicas=3), "kyma-system")
        eventually(lambda: replicas(runtime) == 3, "the edit's replicas in the runtime", watching, 20)
        assert runtime.get_object("ConfigMap", "keda-config", "kyma-system")["data"]["replicas"] == "3"
        # Its progress is saved once the edit is handled and reported (the manifests reach the
        # runtime before that: a manager stopped in between handles the edit again on restart).
        edited = ModuleConfig.objects.get(kyma=kyma).revision
        eventually(lambda: saved_revision(state) >= edited, "the manager saves its progress", watching)
    finally:
        manager.stop()

    # While the manager is down the CR changes; restarted, it resumes from its state file.
    handled = saved_revision(state)
    runtime.edit_as_user("Keda", "default", lambda obj: obj["spec"].update(replicas=5), "kyma-system")
    eventually(
        lambda: ModuleConfig.objects.get(kyma=kyma).spec.get("replicas") == 5,
        "the ModuleConfig follows the CR",
        control_plane["processes"],
    )
    manager = start_manager(control_plane["url"], key, state)
    try:
        eventually(lambda: replicas(runtime) == 5, "the restarted manager catches up", [manager], 20)
        assert f"starts after revision {handled}" in manager.output()
    finally:
        manager.stop()
