"""The control plane as an SRE installs and runs it, on a real kube-apiserver (see conftest.py):
installed by the documented steps, used only through what it exposes (its web role behind the
Ingress's headers, its listener behind the Istio gateway's stand-in or a TCP load balancer), and
disturbed the way a cluster disturbs it (an eviction, a deleted pod, a rolling update)."""

from __future__ import annotations

import base64
import json
import threading
import time
from dataclasses import dataclass, field

import pytest

from envtest.install import (
    NAMESPACE,
    ROLES,
    Installation,
    WebSession,
    events_outcome,
    gateway_stats,
    runtime_edit,
    wait_for,
    watcher_metrics,
)
from pki import crypto

# docs/operators/database.md's table, for the example overlay (tests/deploy adds it up again).
CONNECTIONS = 63
CONNECTIONS_ROLLING = 84


def ready_replicas(installed: Installation, role: str) -> tuple[int, int]:
    deployment = installed.get("deployment", f"controlplane-{role}") or {}
    return deployment["spec"]["replicas"], (deployment.get("status") or {}).get("readyReplicas", 0)


def kymas(web: WebSession) -> dict[str, dict]:
    return {k["metadata"]["name"]: k for k in web.get("/api/v1/kymas/")["results"]}


# -- the install ---------------------------------------------------------------------------------


def test_the_documented_install_runs_every_role_and_the_migration_job(installed, web):
    job = installed.get("job", "controlplane-migrate")
    assert job is not None and job["status"].get("succeeded") == 1
    for role in ROLES:
        wanted, ready = ready_replicas(installed, role)
        assert ready == wanted >= 2, role
    # The first administrator logged in (the fixture) with the password of the Secret, which the
    # Job's output never shows.
    job_pods = installed.node.pods(NAMESPACE, "controlplane-migrate")
    output = "".join(
        (worker.state.workdir / f"{name}.log").read_text(errors="replace")
        for worker in job_pods
        for name in ("migrate", "pki-bootstrap", "admin")
        if (worker.state.workdir / f"{name}.log").exists()
    )
    assert "Created administrator 'admin'" in output
    assert installed.admin_password not in output


def test_the_database_connections_stay_within_the_budget(installed, web):
    web.get("/api/v1/kymas/")  # every role has been busy since the install
    assert 0 < installed.database_connections() <= CONNECTIONS


def test_the_workers_keep_the_gateway_secret_with_the_listener_certificate(installed, web):
    def secret() -> dict | None:
        return installed.get("secret", "kcp-listener-gateway-tls", "istio-system")

    found = wait_for(secret, timeout=120, what="the workers writing the gateway's Secret")
    data = {key: base64.b64decode(value) for key, value in found["data"].items()}
    certificate = crypto.load_certificate(data["tls.crt"])
    assert crypto.dns_names(certificate) == ["listener.kcp.example.org"]
    assert crypto.public_key_matches(certificate, crypto.load_private_key(data["tls.key"]))
    (ca,) = crypto.load_certificates(data["ca.crt"])
    crypto.verify_server(
        certificate, [ca], hostname="listener.kcp.example.org", now=certificate.not_valid_before_utc
    )
    metrics = web.text("/metrics")
    name = "controlplane_gateway_certificate_expiry_timestamp_seconds"
    name += '{secret="istio-system/kcp-listener-gateway-tls"}'
    (line,) = [line for line in metrics.splitlines() if line.startswith(name)]
    assert float(line.split()[-1]) == certificate.not_valid_after_utc.timestamp()


def test_the_workers_identity_may_do_exactly_one_secret_in_one_namespace(installed):
    """Probed as the identity itself (a token of controlplane-worker), against the API server."""
    token = json.loads(
        installed.kubectl("-n", NAMESPACE, "create", "token", "controlplane-worker", "-o", "json")
    )["status"]["token"]

    def can(verb: str, resource: str, namespace: str, name: str = "") -> bool:
        args = [
            "auth",
            "can-i",
            verb,
            resource + (f"/{name}" if name else ""),
            "-n",
            namespace,
            f"--token={token}",
        ]
        return installed.kubectl(*args, check=False).strip() == "yes"

    secret = "kcp-listener-gateway-tls"
    assert can("get", "secrets", "istio-system", secret)
    assert can("patch", "secrets", "istio-system", secret)
    refused = [
        ("get", "secrets", "istio-system", "another"),
        ("patch", "secrets", "istio-system", "another"),
        ("delete", "secrets", "istio-system", secret),
        ("update", "secrets", "istio-system", secret),
        ("list", "secrets", "istio-system", ""),
        ("watch", "secrets", "istio-system", ""),
        ("create", "secrets", "istio-system", ""),
        ("get", "secrets", NAMESPACE, "controlplane-secrets"),
        ("get", "configmaps", "istio-system", ""),
        ("create", "pods", NAMESPACE, ""),
        ("get", "nodes", "", ""),
    ]
    assert [r for r in refused if can(*r)] == []
    # And the writes themselves, not only what the authorizer answers when asked:
    other = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "another", "namespace": "istio-system"},
    }
    answer = installed.kubectl(
        "apply", "--server-side", "--field-manager=probe", "-f", "-", f"--token={token}",
        stdin=json.dumps(other), check=False,
    )  # fmt: skip
    assert "another" not in answer
    assert installed.get("secret", "another", "istio-system") is None


# -- runtimes, events, reconciles ----------------------------------------------------------------


def test_three_runtimes_registered_through_the_api_become_ready(registered, web):
    def all_ready() -> bool:
        found = kymas(web)
        return len(found) == 3 and all(
            (k.get("status") or {}).get("state") == "Ready" for k in found.values()
        )

    wait_for(all_ready, timeout=300, what="the three Kymas Ready")
    for runtime in registered.installed_runtimes:
        assert runtime.runtime.node.process("kyma-system", "skr-webhook") is not None  # the watcher runs


def test_a_kubectl_edit_reaches_the_listener_through_the_gateway_and_an_installed_worker_reconciles_it(
    registered, web
):
    runtime = registered.installed_runtimes[0]
    before = gateway_stats(registered).get("status_200", 0)
    runtime.runtime.call(  # what `kubectl -n kyma-system patch kyma default` sends
        "PATCH",
        runtime.runtime.path("operator.kyma-project.io/v1beta2", "kymas", "default", "kyma-system"),
        body={"spec": {"channel": "fast"}},
        content_type="application/merge-patch+json",
    )
    wait_for(
        lambda: kymas(web)[runtime.kyma]["spec"]["channel"] == "fast",
        timeout=60,
        what="the control plane's copy following the runtime's edit",
    )
    def recorded() -> bool:  # the listener records its events in the background, in batches
        events = web.get("/api/v1/events/", kyma=runtime.kyma)["results"]
        return any(e["watched"] == {"namespace": "kyma-system", "name": "default"} for e in events)

    wait_for(recorded, timeout=30, what="the installed listener's record of the event")
    assert gateway_stats(registered).get("status_200", 0) > before  # through the gateway
    assert any(
        runtime.kyma in (worker.state.workdir / "worker.log").read_text(errors="replace")
        for worker in registered.node.pods(NAMESPACE, "controlplane-worker")
        if (worker.state.workdir / "worker.log").exists()
    )


# -- disruptions ---------------------------------------------------------------------------------


def test_an_eviction_the_disruption_budget_refuses(registered):
    pods = [p["metadata"]["name"] for p in registered.pods("beat")]
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"namespace": NAMESPACE}}
    answers = []
    for name in pods:
        body = {**eviction, "metadata": {**eviction["metadata"], "name": name}}
        try:
            registered.server_call("POST", f"/api/v1/namespaces/{NAMESPACE}/pods/{name}/eviction", body)
            answers.append(201)
        except RuntimeError as exc:
            answers.append(int(str(exc).split(":", 1)[0]))
    assert answers[0] == 201
    assert 429 in answers[1:], answers  # minAvailable 1 of 2: the second is refused
    wait_for(lambda: ready_replicas(registered, "beat")[1] == 2, timeout=180, what="beat back to two")


def test_the_beat_leaders_pod_deleted_another_takes_over(registered, web):
    def leader() -> str:
        text = web.text("/metrics")
        for line in text.splitlines():
            if line.startswith("controlplane_beat_leader_since_timestamp_seconds{"):
                return line.split('holder="', 1)[1].split('"', 1)[0]
        return ""

    first = wait_for(leader, timeout=60, what="a beat leading")
    pod = next(p["metadata"]["name"] for p in registered.pods("beat") if p["metadata"]["name"] in first)
    registered.kubectl("-n", NAMESPACE, "delete", "pod", pod, "--wait=false")
    second = wait_for(lambda: (h := leader()) and pod not in h and h, timeout=60, what="another beat leading")
    assert pod not in second
    wait_for(lambda: ready_replicas(registered, "beat")[1] == 2, timeout=180, what="beat back to two")


# -- a rolling update while events flow ----------------------------------------------------------


@dataclass
class Edits:
    """Users editing their runtimes' Kymas, one edit a second per runtime, until stopped."""

    installed: Installation
    made: int = 0
    stop: threading.Event = field(default_factory=threading.Event)
    errors: list[str] = field(default_factory=list)

    last: str = ""

    def run(self) -> None:
        channels = ["fast", "regular"]
        turn = 0
        while not self.stop.is_set():
            turn += 1
            self.last = channels[turn % 2]
            for runtime in self.installed.installed_runtimes:
                try:
                    runtime_edit(runtime, self.last)
                    self.made += 1
                except Exception as exc:
                    self.errors.append(str(exc))
            self.stop.wait(1.0)


def test_a_rolling_update_of_every_deployment_to_a_new_build_while_events_flow(registered, web):
    registered.release_alias("0.1.1")  # a new build of the same code, under a new tag
    site = registered.site_overlay(tag="0.1.1")
    gateway_before = gateway_stats(registered)
    edits = Edits(registered)
    peak = [0]
    sampling = threading.Event()

    def sample() -> None:
        while not sampling.is_set():
            peak[0] = max(peak[0], registered.database_connections())
            sampling.wait(0.5)

    threads = [threading.Thread(target=edits.run, daemon=True), threading.Thread(target=sample, daemon=True)]
    since = time.time()
    for thread in threads:
        thread.start()
    try:
        time.sleep(5)  # events flowing before the update starts
        registered.migrate(site)  # the documented upgrade: the Job of the new build, then the roles
        registered.roll_out(site)
        time.sleep(5)
    finally:
        edits.stop.set()
    rolled = time.time() - since
    for role in ROLES:
        images = {c["image"] for p in registered.pods(role) for c in p["spec"]["containers"]}
        assert images == {"registry.example.com/kyma-fleet/controlplane:0.1.1"}, role
    outcome = events_outcome(registered, edits.made, since, gateway_before)
    sampling.set()
    print(f"rolling update: {rolled:.0f} s, {outcome.line()}, peak_db_connections={peak[0]}")
    assert edits.errors == []
    assert edits.made > 20
    assert (outcome.lost, outcome.server_errors) == (0, 0)
    assert peak[0] <= CONNECTIONS_ROLLING
    # The control plane's copies follow the last edit of each runtime.
    wait_for(
        lambda: {k["spec"]["channel"] for k in kymas(web).values()} == {edits.last},
        timeout=60,
        what=f"every Kyma's copy on the last edit ({edits.last})",
    )


# -- without Istio -------------------------------------------------------------------------------


def test_the_direct_mode_listener_takes_the_events_behind_a_load_balancer(registered, web):
    site = registered.site_overlay(overlay="example-direct")
    registered.roll_out(site)
    address = registered.load_balancer(NAMESPACE, "controlplane-listener")
    registered.point_listener_host_at(address)
    runtime = registered.installed_runtimes[1]
    channel = {"fast": "regular", "regular": "fast"}[kymas(web)[runtime.kyma]["spec"]["channel"]]
    before = watcher_metrics(runtime).get("watcher_events_sent_total", 0)
    gateway_before = gateway_stats(registered).get("status_200", 0)
    runtime_edit(runtime, channel)
    wait_for(
        lambda: kymas(web)[runtime.kyma]["spec"]["channel"] == channel,
        timeout=60,
        what="the edit reconciled through the direct listener",
    )
    assert watcher_metrics(runtime).get("watcher_events_sent_total", 0) > before
    assert gateway_stats(registered).get("status_200", 0) == gateway_before  # not through the gateway


@pytest.fixture(autouse=True)
def _node_healthy(installed):
    yield
    assert installed.node.errors == [], installed.node.errors[-5:]
