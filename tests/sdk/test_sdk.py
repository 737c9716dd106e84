"""The SDK's own pieces: it verifies what ``fleet.notifications`` signs, and keeps its progress."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from kyma_module_sdk import (
    InvalidNotification,
    Manager,
    ModuleConfig,
    notification_config,
    verify_notification,
)

from fleet.notifications import signature
from fleet.services import modules as module_services
from kernel.api_tokens import api_token_create
from tests.factories import KymaFactory, ModuleFactory
from tests.support.processes import start_web

SDK = Path(__file__).resolve().parents[2] / "sdk"
KEY = b"k" * 32
DOC = {
    "apiVersion": "controlplane.kyma-project.io/v1alpha1",
    "kind": "ModuleConfig",
    "metadata": {"name": "c1-keda", "namespace": "kcp-system", "uid": "u-1", "resourceVersion": "7"},
    "spec": {"kyma": "c1", "runtimeID": "rt-c1", "module": "keda", "resource": {"replicas": 2}},
}


def test_a_notification_signed_by_the_control_plane_verifies_and_yields_its_config():
    body = json.dumps(DOC).encode()
    stamp = str(int(time.time()))
    headers = {"X-Controlplane-Timestamp": stamp, "X-Controlplane-Signature": signature(KEY, stamp, body)}
    config = notification_config(KEY, body, headers)
    assert (config.kyma, config.module, config.resource, config.revision) == (
        "c1",
        "keda",
        {"replicas": 2},
        7,
    )


@pytest.mark.parametrize(
    ("key", "body", "age"),
    [(b"other", b"{}", 0), (KEY, b'{"tampered": 1}', 0), (KEY, b"{}", 301)],
)
def test_a_wrong_key_a_changed_body_or_a_replay_is_refused(key, body, age):
    stamp = str(int(time.time()) - age)
    good = signature(KEY, stamp, b"{}")
    assert not verify_notification(key, body, stamp, good)
    with pytest.raises(InvalidNotification):
        notification_config(key, body, {"x-controlplane-timestamp": stamp, "x-controlplane-signature": good})


def test_the_state_file_keeps_the_last_revision_across_restarts(tmp_path):
    state = tmp_path / "keda.state"
    first = Manager(api="http://127.0.0.1:9/api/v1", token="t", module="keda", state_file=str(state))
    first._save_state(41)
    first._save_state(40)  # never backwards
    again = Manager(api="http://127.0.0.1:9/api/v1", token="t", module="keda", state_file=str(state))
    assert again.revision == 41
    assert list(tmp_path.iterdir()) == [state]  # no temporary file left behind


@pytest.mark.django_db(transaction=True)
def test_a_manager_whose_state_is_ahead_of_the_control_plane_starts_over(tmp_path):
    """Its state file outlived the control plane's data (reset, restore): the watch answers 410
    and the manager handles every config again instead of waiting for revisions never to come."""
    keda = ModuleFactory(name="keda")
    kyma = KymaFactory(name="c1")
    module_services.moduleconfig_upsert(
        kyma=kyma, module=keda, spec={"replicas": 2}, source_generation=1, source_resource_version=""
    )
    user = User.objects.create_superuser("m", password="x")
    state = tmp_path / "keda.state"
    state.write_text(json.dumps({"revision": 500}))
    web, url = start_web()
    manager = Manager(
        api=f"{url}/api/v1",
        token=api_token_create(user=user, name="m")[1],
        module="keda",
        state_file=str(state),
    )
    seen: list[int] = []

    @manager.handler
    def handle(config: ModuleConfig) -> list[dict]:
        seen.append(config.resource["replicas"])
        manager.stop()
        return []

    runner = threading.Thread(target=manager.run, daemon=True)
    runner.start()
    runner.join(30)
    web.stop()
    assert seen == [2]
    assert json.loads(state.read_text())["revision"] < 500


class _Recording(Manager):
    """A manager whose handling of an event is recorded (and held for config ``a`` at revision
    1 until ``gate`` opens): what is under test is the dispatch around it."""

    def __init__(self, **kwargs) -> None:
        super().__init__(api="http://127.0.0.1:9/api/v1", token="t", module="keda", **kwargs)
        self.gate = threading.Event()
        self.holding = threading.Event()
        self.done: list[tuple[str, int]] = []

    def _on_event(self, event: dict) -> None:
        meta = event["object"]["metadata"]
        if (meta["uid"], meta["resourceVersion"]) == ("a", "1"):
            self.holding.set()
            assert self.gate.wait(10)
        self.done.append((meta["uid"], int(meta["resourceVersion"])))


def _event(uid: str, revision: int) -> dict:
    return {"type": "MODIFIED", "object": {"metadata": {"uid": uid, "resourceVersion": str(revision)}}}


def _until(check, what: str) -> None:
    deadline = time.monotonic() + 10
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def test_configs_are_handled_side_by_side_latest_first_and_progress_never_passes_one_in_hand(tmp_path):
    state = tmp_path / "keda.state"
    manager = _Recording(state_file=str(state), concurrency=4)
    try:
        manager._work.put(_event("a", 1))
        # a@1 in hand first: had a@3 arrived while a@1 still waited, it would rightly replace it.
        assert manager.holding.wait(10), "a@1 never reached a handler"
        for uid, revision in [("b", 2), ("a", 3), ("a", 4), ("c", 5)]:
            manager._work.put(_event(uid, revision))
        _until(lambda: {("b", 2), ("c", 5)} <= set(manager.done), "b and c handled while a is held")
        assert manager.revision == 0  # a at revision 1 is still in hand: a restart must repeat it
        manager.gate.set()
        _until(lambda: ("a", 4) in manager.done, "a's latest version handled")
        _until(lambda: manager.revision == 5, "progress saved")
        assert [item for item in manager.done if item[0] == "a"] == [("a", 1), ("a", 4)]  # 3 was replaced
        assert json.loads(state.read_text())["revision"] == 5
    finally:
        manager.stop()


def test_of_the_configs_waiting_the_one_handled_longest_ago_goes_first():
    """A runtime whose config keeps changing does not hold back another runtime's change."""
    manager = _Recording(concurrency=1)
    try:
        manager._work.put(_event("b", 0))
        _until(lambda: ("b", 0) in manager.done, "b handled")
        manager._work.put(_event("a", 1))
        assert manager.holding.wait(10), "a@1 never reached a handler"
        manager._work.put(_event("b", 2))  # b changes again, c for the first time
        manager._work.put(_event("c", 3))
        manager.gate.set()
        _until(lambda: len(manager.done) == 4, "all handled")
        assert manager.done == [("b", 0), ("a", 1), ("c", 3), ("b", 2)]
    finally:
        manager.stop()


def test_a_config_carries_the_version_to_run_and_a_new_version_is_new_work():
    doc = {**DOC, "spec": {**DOC["spec"], "version": "1.2.0"}}
    config = ModuleConfig.from_document(doc)
    assert config.version == "1.2.0"
    older = ModuleConfig.from_document({**DOC, "spec": {**DOC["spec"], "version": "1.1.0"}})
    assert config.fingerprint != older.fingerprint  # the handler runs again for a new version
    assert ModuleConfig.from_document(DOC).version == ""  # a control plane that does not say


MAIN = """
import os
from kyma_module_sdk import Manager
manager = Manager(api=os.environ["KCP_API"], token=os.environ.get("KCP_TOKEN", ""), module="keda")
manager.handler(lambda config: [])
manager.main()
"""


def _manager_process(api: str, token: str | None) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "KCP_TOKEN"}
    env.update(KCP_API=api, PYTHONPATH=str(SDK))
    if token is not None:
        env["KCP_TOKEN"] = token
    return subprocess.Popen(
        [sys.executable, "-c", MAIN], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def test_a_manager_without_a_credential_stops_at_once_with_one_line():
    process = _manager_process("http://127.0.0.1:9/api/v1", None)
    _, err = process.communicate(timeout=30)
    assert process.returncode == 2
    assert err.splitlines() == [
        (
            "keda manager: credential refused (401: no credential given: pass the module credential "
            "(kcpm_...) as token); stopping"
        )
    ]


@pytest.mark.django_db(transaction=True)
def test_a_manager_whose_credential_the_control_plane_refuses_stops_instead_of_retrying():
    web, url = start_web()
    try:
        process = _manager_process(f"{url}/api/v1", "kcpm_not-a-credential")
        _, err = process.communicate(timeout=60)
    finally:
        web.stop()
    assert process.returncode == 2
    (line,) = [line for line in err.splitlines() if "credential refused" in line]
    assert line.startswith("keda manager: credential refused (401: ")
    assert "Traceback" not in err


def test_ctrl_c_stops_a_manager_without_a_traceback():
    process = _manager_process("http://127.0.0.1:9/api/v1", "kcpm_any")  # nothing listens: it retries
    try:
        _until_output(process, "manager of keda starts")
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=30)
    finally:
        process.kill()
    assert process.returncode == 0
    assert "Traceback" not in err
    assert "manager of keda stopped at revision 0" in err


def _until_output(process: subprocess.Popen, text: str) -> None:
    assert process.stderr is not None
    deadline = time.monotonic() + 30
    seen = ""
    while text not in seen:
        assert time.monotonic() < deadline, f"{text!r} not printed: {seen}"
        seen += process.stderr.readline()
