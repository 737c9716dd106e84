"""The control plane as an SRE installs, upgrades and runs it, on a real kube-apiserver (see
conftest.py): the previous release installed by the documented steps, upgraded to this tree while
its runtimes send events, then used only through what it exposes (its web role behind the
Ingress's headers, its listener behind the Istio gateway's stand-in or a TCP load balancer) and
disturbed the way a cluster disturbs it (an eviction, a deleted pod, a rolling update).

The upgrade (docs/operators/upgrades.md): the previous release (deploy/previous-release.yaml, a
commit of main: its deploy/ and its images) serves three runtimes; this tree's migration Job runs
while the old pods serve (expand, then contract in a later release: the old code keeps working on
the new schema until it is gone), then every Deployment rolls to the new images, and no event may
be lost and the gateway may answer no 5xx meanwhile. The test holds whatever the migrations are:
it installs whatever the named commit shipped and upgrades to whatever this tree ships."""

from __future__ import annotations

import base64
import json
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from envtest.install import (
    NAMESPACE,
    ROLES,
    Edits,
    EventsOutcome,
    Installation,
    Release,
    WebSession,
    events_outcome,
    gateway_stats,
    runtime_edit,
    wait_for,
    watcher_metrics,
)
from pki import crypto
from tests.install.conftest import PREVIOUS, ROOT

# docs/operators/database.md's table, for the example overlay (tests/deploy adds it up again).
CONNECTIONS = 63
CONNECTIONS_ROLLING = 84


def ready_replicas(installed: Installation, role: str) -> tuple[int, int]:
    deployment = installed.get("deployment", f"controlplane-{role}") or {}
    return deployment["spec"]["replicas"], (deployment.get("status") or {}).get("readyReplicas", 0)


def kymas(web: WebSession) -> dict[str, dict]:
    return {k["metadata"]["name"]: k for k in web.get("/api/v1/kymas/")["results"]}


ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "install"


def record(name: str, line: str) -> None:
    """The figures of a run, for its note (the test's own output is the worker's)."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / f"{name}.txt").write_text(line + "\n")
    print(line)


@dataclass
class Upgrade:
    outcome: EventsOutcome
    errors: list[str]
    old_pods_ready_while_migrating: list[bool]
    images: dict[str, set[str]]
    tag: str


@pytest.fixture(scope="module")
def upgraded(registered: Installation) -> Upgrade:
    """The upgrade to this tree (its images built as its Dockerfiles say), once, while users edit
    their runtimes' Kymas: the migration Job while the old pods serve, then the roles."""
    new = Release(ROOT, "0.1.0")
    new.build(registered.workdir)
    registered.add_release(new)
    registered.release = new
    site = registered.site_overlay(new)
    gateway_before = gateway_stats(registered)
    edits = Edits(registered)
    thread = threading.Thread(target=edits.run, daemon=True)
    since = time.time()
    thread.start()
    ready_while_migrating = []
    try:
        time.sleep(5)
        migrating = threading.Thread(target=registered.migrate, args=(site,), daemon=True)
        migrating.start()
        while migrating.is_alive():
            ready_while_migrating.append(all(registered.ready_replicas(role) >= 1 for role in ROLES))
            migrating.join(1)
        registered.roll_out(site)
        time.sleep(5)
    finally:
        edits.stop.set()
        thread.join(10)
    images = {
        role: {c["image"] for p in registered.pods(role) for c in p["spec"]["containers"]} for role in ROLES
    }
    outcome = events_outcome(registered, edits.made, since, gateway_before)
    record("upgrade", f"upgrade from {PREVIOUS[:7]}: {time.time() - since:.0f} s, {outcome.line()}")
    return Upgrade(outcome, edits.errors, ready_while_migrating, images, new.tag)


def test_the_previous_release_installed_by_the_documented_steps_serves_three_runtimes(registered, web):
    assert {k["status"]["state"] for k in kymas(web).values()} == {"Ready"}
    assert gateway_stats(registered).get("status_200", 0) > 0  # their watchers reach it


def test_an_upgrade_from_the_previous_release_loses_no_event_and_answers_no_5xx(upgraded, registered):
    assert upgraded.errors == []
    assert upgraded.old_pods_ready_while_migrating and all(upgraded.old_pods_ready_while_migrating)
    assert registered.get("job", "controlplane-migrate")["status"].get("succeeded") == 1
    assert upgraded.images == {
        role: {f"registry.example.com/kyma-fleet/controlplane:{upgraded.tag}"} for role in ROLES
    }
    assert upgraded.outcome.sent > 20
    assert (upgraded.outcome.lost, upgraded.outcome.server_errors) == (0, 0), upgraded.outcome.line()


# -- the install ---------------------------------------------------------------------------------


def test_the_upgraded_install_runs_every_role_and_the_first_administrator_never_printed(
    upgraded, installed, web
):
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
    assert "An administrator exists" in output  # made by the previous release's install
    assert installed.admin_password not in output
    installed.session()  # the password of the Secret


def test_the_database_connections_stay_within_the_budget(upgraded, installed, web):
    web.get("/api/v1/kymas/")  # every role has been busy since the install
    assert 0 < installed.database_connections() <= CONNECTIONS


def test_the_workers_keep_the_gateway_secret_with_the_listener_certificate(upgraded, installed, web):
    """An operator renews the listener's certificate in the admin; within seconds the workers
    write it into the gateway's Secret (their field manager), and the metric shows its expiry."""
    (listener,) = web.get("/api/v1/certificates/", purpose="listener", status="valid")["results"]
    page = web.text("/admin/pki/certificate/?purpose__exact=listener&status=valid")
    (row,) = re.findall(r'name="_selected_action" value="(\d+)"', page)
    web.admin_action("/admin/pki/certificate/", "renew", [row])

    def renewed_by_the_workers() -> dict | None:  # (the API's answer: kubectl hides managedFields)
        found = installed.server_call(
            "GET", "/api/v1/namespaces/istio-system/secrets/kcp-listener-gateway-tls"
        )
        managers = {entry["manager"] for entry in found.get("metadata", {}).get("managedFields") or ()}
        data = found.get("data") or {}
        if "kyma-control-plane" not in managers or "tls.crt" not in data:
            return None
        certificate = crypto.load_certificate(base64.b64decode(data["tls.crt"]))
        return found if crypto.serial_hex(certificate) != listener["serial"] else None

    found = wait_for(renewed_by_the_workers, timeout=120, what="the workers writing the renewed certificate")
    data = {key: base64.b64decode(value) for key, value in found["data"].items()}
    certificate = crypto.load_certificate(data["tls.crt"])
    assert crypto.dns_names(certificate) == ["listener.kcp.example.org"]
    assert crypto.public_key_matches(certificate, crypto.load_private_key(data["tls.key"]))
    (ca,) = crypto.load_certificates(data["ca.crt"])
    crypto.verify_server(
        certificate, [ca], hostname="listener.kcp.example.org", now=certificate.not_valid_before_utc
    )
    name = "controlplane_gateway_certificate_expiry_timestamp_seconds"
    name += '{secret="istio-system/kcp-listener-gateway-tls"}'

    def expiry() -> float:
        lines = [line for line in web.text("/metrics").splitlines() if line.startswith(name)]
        return float(lines[0].split()[-1]) if lines else 0.0

    wait_for(
        lambda: expiry() == certificate.not_valid_after_utc.timestamp(),
        timeout=60,
        what="the renewed certificate's expiry as a metric",
    )


def test_the_workers_identity_may_do_exactly_one_secret_in_one_namespace(upgraded, installed):
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


def test_the_three_runtimes_stay_ready_after_the_upgrade(upgraded, registered, web):
    wait_for(
        lambda: {k["status"]["state"] for k in kymas(web).values()} == {"Ready"},
        timeout=120,
        what="the three Kymas Ready",
    )
    for runtime in registered.installed_runtimes:
        assert runtime.runtime.node.process("kyma-system", "skr-webhook") is not None  # the watcher runs


def test_a_kubectl_edit_reaches_the_listener_through_the_gateway_and_an_installed_worker_reconciles_it(
    upgraded, registered, web
):
    runtime = registered.installed_runtimes[0]
    before = gateway_stats(registered).get("status_200", 0)
    # (events of this Kyma recorded before the edit: the upgrade's traffic edited it too, and may
    # have left it on either channel: the edit moves it to the other, or it would change nothing
    # and the runtime watcher, rightly, send no event)
    seen = {e["id"] for e in web.get("/api/v1/events/", kyma=runtime.kyma)["results"]}
    current = runtime.runtime.get("operator.kyma-project.io/v1beta2", "kymas", "default", "kyma-system")
    channel = {"fast": "regular", "regular": "fast"}[current["spec"]["channel"]]
    runtime.runtime.call(  # what `kubectl -n kyma-system patch kyma default` sends
        "PATCH",
        runtime.runtime.path("operator.kyma-project.io/v1beta2", "kymas", "default", "kyma-system"),
        body={"spec": {"channel": channel}},
        content_type="application/merge-patch+json",
    )
    wait_for(
        lambda: kymas(web)[runtime.kyma]["spec"]["channel"] == channel,
        timeout=60,
        what="the control plane's copy following the runtime's edit",
    )

    def recorded() -> bool:  # the listener records its events in the background, in batches
        events = web.get("/api/v1/events/", kyma=runtime.kyma)["results"]
        return any(
            e["id"] not in seen and e["watched"] == {"namespace": "kyma-system", "name": "default"}
            for e in events
        )

    # The edit may reach the control plane first through a periodic reconcile, which reads the
    # runtime's Kyma too; its event follows through the gateway.
    wait_for(recorded, timeout=60, what="the installed listener's record of the edit's event")
    assert gateway_stats(registered).get("status_200", 0) > before  # through the gateway
    assert any(
        runtime.kyma in (worker.state.workdir / "worker.log").read_text(errors="replace")
        for worker in registered.node.pods(NAMESPACE, "controlplane-worker")
        if (worker.state.workdir / "worker.log").exists()
    )


# -- disruptions ---------------------------------------------------------------------------------


def test_an_eviction_the_disruption_budget_refuses(upgraded, registered):
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


def test_the_beat_leaders_pod_deleted_another_takes_over(upgraded, registered, web):
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


def test_a_rolling_update_of_every_deployment_to_a_new_build_while_events_flow(upgraded, registered, web):
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
    record(
        "rolling-update", f"rolling update: {rolled:.0f} s, {outcome.line()}, peak_db_connections={peak[0]}"
    )
    assert edits.errors == []
    assert edits.made > 20
    assert (outcome.lost, outcome.server_errors) == (0, 0), outcome.line()
    assert peak[0] <= CONNECTIONS_ROLLING
    # The control plane's copies follow the last edit of each runtime.
    wait_for(
        lambda: {name: k["spec"]["channel"] for name, k in kymas(web).items()} == edits.last,
        timeout=60,
        what=f"every Kyma's copy on its runtime's last edit ({edits.last})",
    )


# -- without Istio -------------------------------------------------------------------------------


def test_the_direct_mode_listener_takes_the_events_behind_a_load_balancer(upgraded, registered, web):
    site = registered.site_overlay(overlay="example-direct")
    # A site that changes its overlay applies it as an upgrade does (docs/operators/upgrades.md):
    # the migration Job again (its template cannot change in place), then the roles.
    registered.migrate(site)
    registered.roll_out(site)
    address = registered.load_balancer(NAMESPACE, "controlplane-listener")
    registered.point_listener_host_at(address)
    # A site without Istio has no ingress gateway. Removing it also ends the runtime watchers'
    # pooled connections to it (a keep-alive connection outlives a DNS change), so they connect
    # again, to the listener's load balancer: what follows cannot pass through a gateway.
    registered.kubectl("-n", "istio-system", "delete", "deployment", "istio-ingressgateway", "--wait=true")
    wait_for(
        lambda: not registered.kubectl("-n", "istio-system", "get", "pods", "-o", "name").strip(),
        timeout=120,
        what="the ingress gateway's pod gone",
    )
    runtime = registered.installed_runtimes[1]
    channel = {"fast": "regular", "regular": "fast"}[kymas(web)[runtime.kyma]["spec"]["channel"]]
    before = watcher_metrics(runtime).get("watcher_events_sent_total", 0)
    runtime_edit(runtime, channel)
    # (the watcher's sender retries with a growing delay while it finds the new address)
    wait_for(
        lambda: watcher_metrics(runtime).get("watcher_events_sent_total", 0) > before,
        timeout=120,
        what="the edit's event answered 200 by the direct listener",
    )
    wait_for(
        lambda: kymas(web)[runtime.kyma]["spec"]["channel"] == channel,
        timeout=60,
        what="the edit reconciled",
    )


@pytest.fixture(autouse=True)
def _node_healthy(installed):
    """Whatever the nodes could not do (a sandbox, a volume, a status) fails the test that saw it."""
    yield
    nodes = [installed.node, *(r.runtime.node for r in installed.installed_runtimes)]
    errors = [error for node in nodes for error in node.errors]
    assert errors == [], errors[-5:]
