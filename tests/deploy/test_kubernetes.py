"""deploy/kubernetes: every object is valid Kubernetes, and the manifests agree with the project.

Schema validity comes from kubernetes-validate's strict schemas (unknown fields are errors) for
the Kubernetes version below; the cross-checks catch what a schema cannot: undocumented
variables, a role without a disruption budget, probes or spread, mismatched images, ports or names.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path

import kubernetes_validate
import pytest

from kernel.readiness import CHECK_TIMEOUT
from tests.deploy.manifests import (
    BASE,
    KUBERNETES,
    KUBERNETES_VERSION,
    ROOT,
    SECRET_KEYS,
    SECRET_NAME,
    config_data,
    containers,
    documented_variables,
    is_kustomization,
    load,
    main_container,
    pod_spec,
    references,
    yaml_files,
)
from watchers import gateway as routing

IMAGE_REPOSITORY = "ghcr.io/kyma-fleet/controlplane"
# Kubernetes-side helpers: only used inside $(...) expansions, never read by the application.
KUBERNETES_HELPERS = {"POD_IP"}
ROLE_COMMANDS = {
    "controlplane-web": ["python", "manage.py", "serve", "web"],
    "controlplane-listener": ["python", "manage.py", "serve", "listener"],
    "controlplane-worker": ["celery", "-A", "controlplane", "worker"],
    "controlplane-beat": ["celery", "-A", "controlplane", "beat"],
}
ALL_FILES = yaml_files(KUBERNETES)


def _id(path: Path) -> str:
    return str(path.relative_to(KUBERNETES))


def _workloads(objects: dict[tuple[str, str], dict]) -> list[dict]:
    return [o for (kind, _), o in objects.items() if kind in ("Deployment", "Job")]


def _env(container: dict) -> dict[str, dict]:
    return {entry["name"]: entry for entry in container.get("env", [])}


def _port(container: dict, name_or_number: str | int) -> int:
    if isinstance(name_or_number, int):
        return name_or_number
    return next(p["containerPort"] for p in container["ports"] if p["name"] == name_or_number)


# --- every file and every built object against the Kubernetes schemas ----------------------------


def test_the_pinned_kubernetes_validate_ships_the_version_we_validate_against():
    assert KUBERNETES_VERSION in kubernetes_validate.utils.all_versions()


@pytest.mark.parametrize("path", ALL_FILES, ids=_id)
def test_every_object_in_every_file_validates_strictly(path):
    documents = [doc for doc in load(path) if not is_kustomization(doc)]
    for doc in documents:
        assert kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True) == "1.37"
    assert documents or path.name == "kustomization.yaml", f"{path} holds no object"


def test_built_objects_validate_strictly(built):
    for obj in built.values():
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


def test_strict_validation_rejects_an_unknown_field():
    beat = next(doc for doc in load(BASE / "beat.yaml") if doc["kind"] == "Deployment")
    pod_spec(beat)["containers"][0]["imagePullPolcy"] = "Always"
    with pytest.raises(kubernetes_validate.ValidationError, match="imagePullPolcy"):
        kubernetes_validate.validate(beat, KUBERNETES_VERSION, strict=True)


# --- environment: documented, defined before use, secrets from the Secret --------------------------


def _variables(objects: dict[tuple[str, str], dict]) -> set[str]:
    names = set(config_data(objects))
    for workload in _workloads(objects):
        for container in containers(pod_spec(workload)):
            names.update(_env(container))
    return names


def test_every_variable_is_in_the_settings_reference(built):
    undocumented = _variables(built) - documented_variables() - KUBERNETES_HELPERS
    assert undocumented == set()


def test_kubernetes_only_helpers_are_never_read():
    sources = [p for d in ("controlplane", "watchers", "pki", "listener") for p in (ROOT / d).rglob("*.py")]
    sources += list((ROOT / "deploy" / "gunicorn").glob("*.py"))
    for name in KUBERNETES_HELPERS:
        readers = [str(p) for p in sources if name in p.read_text()]
        assert readers == [], f"{name} is meant to be a Kubernetes-only helper but is read by {readers}"


def test_every_expansion_refers_to_a_variable_defined_before_it(built):
    config_keys = set(config_data(built))
    for workload in _workloads(built):
        for container in containers(pod_spec(workload)):
            defined = set(config_keys) if container.get("envFrom") else set()
            for entry in container.get("env", []):
                for ref in references(entry.get("value", "")):
                    assert ref in defined, (
                        f"{container['name']}: {entry['name']} uses $({ref}) before it is set"
                    )
                defined.add(entry["name"])
            for arg in container.get("command", []) + container.get("args", []):
                for ref in references(arg):
                    assert ref in defined, f"{container['name']}: command uses undefined $({ref})"


def test_every_container_reads_the_shared_config_and_its_secrets_from_the_secret(built):
    for workload in _workloads(built):
        for container in containers(pod_spec(workload)):
            if container["name"] == "static-files":
                continue
            assert container["envFrom"] == [{"configMapRef": {"name": "controlplane-config"}}]
            env = _env(container)
            for key in SECRET_KEYS:
                assert env[key]["valueFrom"]["secretKeyRef"] == {"name": SECRET_NAME, "key": key}
            assert not SECRET_KEYS & set(config_data(built)), "secrets must not be in the ConfigMap"


def test_production_mode_is_on(built):
    assert config_data(built)["DJANGO_DEBUG"] == "0"


# --- roles ------------------------------------------------------------------------------------


def test_each_role_runs_its_documented_command(built):
    for name, command in ROLE_COMMANDS.items():
        assert main_container(built, name)["command"][: len(command)] == command


def test_beat_runs_two_elected_replicas_rolled_one_at_a_time(built):
    """A standby is always there to take over; a rolling update never has none (controlplane/beat.py
    makes two beats safe: one leads, each tick is claimed once)."""
    beat = built[("Deployment", "controlplane-beat")]
    assert beat["spec"]["replicas"] >= 2
    assert beat["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }


ROLES = ("controlplane-web", "controlplane-listener", "controlplane-worker", "controlplane-beat")


@pytest.mark.parametrize("name", ROLES)
def test_every_role_has_a_disruption_budget_probes_and_spreads_over_nodes(built, name):
    deployment = built[("Deployment", name)]
    selector = deployment["spec"]["selector"]
    budget = built[("PodDisruptionBudget", name)]["spec"]
    assert budget["selector"] == selector
    assert budget.get("minAvailable") == 1 or budget.get("maxUnavailable") == 1
    container = main_container(built, name)
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert probe in container, f"{name} has no {probe}"
    (spread,) = pod_spec(deployment)["topologySpreadConstraints"]
    assert spread["topologyKey"] == "kubernetes.io/hostname"
    assert spread["labelSelector"] == selector


@pytest.mark.parametrize(
    ("name", "setting"),
    [("controlplane-worker", "WORKER_METRICS_BIND"), ("controlplane-beat", "BEAT_METRICS_BIND")],
)
def test_the_celery_roles_are_probed_on_their_side_port(built, name, setting):
    """Liveness on /healthz (the process runs: an outage of the broker or the database restarts
    nothing), readiness on /readyz (a beat: leader and standby alike)."""
    container = main_container(built, name)
    port = _port(container, "probes")
    assert _env(container)[setting]["value"] == f"0.0.0.0:{port}"
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "probes"}
    assert container["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "probes"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "probes"}


def test_web_and_listener_run_at_least_two_replicas_with_a_disruption_budget(built):
    for name in ("controlplane-web", "controlplane-listener"):
        deployment = built[("Deployment", name)]
        assert deployment["spec"]["replicas"] >= 2
        budget = built[("PodDisruptionBudget", name)]
        assert budget["spec"]["selector"] == deployment["spec"]["selector"]
        assert budget["spec"]["minAvailable"] == 1


def test_worker_pool_and_concurrency_come_from_the_environment(built):
    worker = main_container(built, "controlplane-worker")
    assert "--pool=$(WORKER_POOL)" in worker["command"]
    assert "--concurrency=$(WORKER_CONCURRENCY)" in worker["command"]
    assert _env(worker)["WORKER_POOL"]["value"] == "threads"
    assert int(_env(worker)["WORKER_CONCURRENCY"]["value"]) >= 1


def test_migration_job_migrates_then_bootstraps_the_pki_then_makes_the_first_administrator(built):
    job = pod_spec(built[("Job", "controlplane-migrate")])
    steps = [c["command"] for c in containers(job)]
    assert steps == [
        ["python", "manage.py", "migrate", "--noinput"],
        ["python", "manage.py", "pki", "bootstrap"],
        ["python", "manage.py", "ensureadmin"],
    ]
    assert [c["name"] for c in job["initContainers"]] == ["migrate", "pki-bootstrap"]  # one after another
    assert job["restartPolicy"] == "Never"
    admin = _env(job["containers"][0])
    for variable, key in (
        ("DJANGO_SUPERUSER_USERNAME", "username"),
        ("DJANGO_SUPERUSER_PASSWORD", "password"),
    ):
        reference = admin[variable]["valueFrom"]["secretKeyRef"]
        assert reference == {"name": "controlplane-admin", "key": key, "optional": True}


def test_every_container_uses_the_same_image(built):
    images = {c["image"] for w in _workloads(built) for c in containers(pod_spec(w))}
    assert len(images) == 1


def test_the_manifests_name_one_image_reference_which_the_kustomization_pins():
    (kustomization,) = load(BASE / "kustomization.yaml")
    (rule,) = kustomization["images"]
    written = {
        c["image"]
        for path in BASE.glob("*.yaml")
        for doc in load(path)
        if doc["kind"] in ("Deployment", "Job")
        for c in containers(pod_spec(doc))
    }
    assert written == {f"{IMAGE_REPOSITORY}:{rule['newTag']}"}
    assert rule["name"] == IMAGE_REPOSITORY


def test_listener_runs_behind_istio_with_trusted_proxies_and_a_metrics_port(built):
    listener = main_container(built, "controlplane-listener")
    env = _env(listener)
    assert env["LISTENER_MODE"]["value"] == "proxy"
    proxies = config_data(built)["LISTENER_TRUSTED_PROXIES"].split(",")
    assert proxies and all(ipaddress.ip_network(p, strict=False) for p in proxies)
    assert env["LISTENER_BIND"]["value"].endswith(f":{_port(listener, 'listener')}")
    assert env["LISTENER_METRICS_BIND"]["value"] == f"0.0.0.0:{_port(listener, 'metrics')}" == "0.0.0.0:9102"
    assert _env(main_container(built, "controlplane-web"))["WEB_BIND"]["value"] == "0.0.0.0:8000"


# --- services, probes, metrics --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("service", "deployment", "port"),
    [
        ("controlplane-web", "controlplane-web", 8000),
        ("controlplane-listener", "controlplane-listener", 8443),
        ("controlplane-listener-metrics", "controlplane-listener", 9102),
    ],
)
def test_services_select_their_pods_and_reach_a_container_port(built, service, deployment, port):
    svc, pods = built[("Service", service)], built[("Deployment", deployment)]
    pod_labels = pods["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= pod_labels.items()
    (svc_port,) = svc["spec"]["ports"]
    assert svc_port["port"] == port
    assert _port(pod_spec(pods)["containers"][0], svc_port["targetPort"]) == port


def test_rendered_routes_reach_the_listener_service(built):
    svc = built[("Service", "controlplane-listener")]
    expected = routing.Destination(
        routing.service_host(svc["metadata"]["name"], svc["metadata"]["namespace"]),
        svc["spec"]["ports"][0]["port"],
    )
    assert routing.listener_destination() == expected


def test_web_probes_liveness_on_healthz_and_readiness_on_readyz(built):
    web = main_container(built, "controlplane-web")
    assert web["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert web["readinessProbe"]["httpGet"]["path"] == "/readyz"
    allowed = config_data(built)["DJANGO_ALLOWED_HOSTS"].split(",")
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        get = web[probe]["httpGet"]
        assert _port(web, get["port"]) == 8000
        (host,) = [h["value"] for h in get["httpHeaders"] if h["name"] == "Host"]
        assert host in allowed, f"{probe} sends Host {host}, which Django would refuse"


def test_listener_probes_use_the_listener_port_or_the_metrics_health_endpoint(built):
    listener = main_container(built, "controlplane-listener")
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        spec = listener[probe]
        if "tcpSocket" in spec:
            assert _port(listener, spec["tcpSocket"]["port"]) == 8443
        else:
            assert spec["httpGet"]["path"] == path
            assert _port(listener, spec["httpGet"]["port"]) == 9102
    assert listener["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert listener["readinessProbe"]["timeoutSeconds"] > CHECK_TIMEOUT


def test_prometheus_scrapes_a_port_that_serves_metrics(built):
    for name, port in (
        ("controlplane-web", 8000),
        ("controlplane-listener", 9102),
        ("controlplane-worker", 9103),
        ("controlplane-beat", 9104),
    ):
        template = built[("Deployment", name)]["spec"]["template"]
        annotations = template["metadata"]["annotations"]
        assert annotations["prometheus.io/scrape"] == "true"
        assert annotations["prometheus.io/path"] == "/metrics"
        assert int(annotations["prometheus.io/port"]) == port
        assert port in [p["containerPort"] for p in template["spec"]["containers"][0]["ports"]]


# --- security and resources -------------------------------------------------------------------------


def test_pods_run_as_non_root_on_a_read_only_root_without_capabilities(built):
    for workload in _workloads(built):
        spec = pod_spec(workload)
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["runAsUser"] != 0
        # Only the workers where they keep the gateway's Secret (components/gateway-secret)
        # hold an API token, of an identity of their own.
        holds_token = spec["automountServiceAccountToken"]
        assert not holds_token or (
            workload["metadata"]["name"] == "controlplane-worker"
            and spec["serviceAccountName"] == "controlplane-worker"
        )
        for container in containers(spec):
            context = container["securityContext"]
            assert context["readOnlyRootFilesystem"] is True
            assert context["allowPrivilegeEscalation"] is False
            assert context["capabilities"] == {"drop": ["ALL"]}
            assert container["resources"]["requests"].keys() >= {"cpu", "memory"}
            assert "memory" in container["resources"]["limits"]


def test_tmp_and_the_state_dir_are_writable_empty_dirs(built):
    state_dir = config_data(built)["CONTROLPLANE_STATE_DIR"]
    for workload in _workloads(built):
        spec = pod_spec(workload)
        volumes = {v["name"]: v for v in spec["volumes"]}
        for container in spec["containers"] + spec.get("initContainers", []):
            mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
            assert "emptyDir" in volumes[mounts[state_dir]]
            if container["name"] != "static-files":
                assert "emptyDir" in volumes[mounts["/tmp"]]


def test_web_links_the_image_static_files_into_the_state_dir(built):
    (init,) = pod_spec(built[("Deployment", "controlplane-web")])["initContainers"]
    state_dir = config_data(built)["CONTROLPLANE_STATE_DIR"]
    assert init["command"] == ["ln", "-sfn", "/app/static", f"{state_dir}/static"]


def test_only_the_istio_ingress_gateway_reaches_the_listener_port(built):
    policy = built[("NetworkPolicy", "controlplane-listener")]["spec"]
    listener_rule = next(r for r in policy["ingress"] if {"port": 8443, "protocol": "TCP"} in r["ports"])
    assert listener_rule["from"] == [
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "istio-system"}},
            "podSelector": {"matchLabels": {"istio": "ingressgateway"}},
        }
    ]


def test_gateway_host_is_what_runtime_watchers_dial_and_what_the_listener_certificate_names(built):
    config = config_data(built)
    host = config["WATCHER_KCP_ADDR"].rpartition(":")[0]
    assert host in config["LISTENER_HOSTNAMES"].split(",")
