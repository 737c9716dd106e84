"""Talking to one runtime's API server: the only code that uses the ``kubernetes`` client.

Everything else calls these small typed functions on plain dicts. Errors are translated the
kopf way: a missing object is ``None`` (or :class:`Gone`), an existing one :class:`Exists`,
connection problems, timeouts, 5xx and 429 are :class:`Temporary` (retry later), anything else is
:class:`Permanent` (the request itself is wrong). Responses are parsed as JSON directly rather
than deserialised into the client's model classes, which is several times faster.
"""

from __future__ import annotations

import contextlib
import json
import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import urllib3
from django.conf import settings
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.rest import ApiException

from kernel.documents.yamlio import load_documents

from .ownership import field_manager

APPLY = "application/apply-patch+yaml"
TYPED_PATCH_FAILED = "failed to create typed patch object"
MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"


class RuntimeAPIError(Exception):
    """A runtime API call failed; ``status`` is the HTTP status (0 when no answer came)."""

    def __init__(self, message: str, *, status: int = 0, reason: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.reason = reason


class Temporary(RuntimeAPIError):
    """Unreachable, timed out, overloaded (429) or broken (5xx): try again later."""


class Permanent(RuntimeAPIError):
    """The runtime refused the request itself (400, 403, 422, ...): retrying will not help."""


class Gone(Permanent):
    """404: the object (or its whole resource type) does not exist."""


class Exists(Permanent):
    """409: the object exists already (create) or changed meanwhile (update)."""


@dataclass(frozen=True)
class ResourceInfo:
    plural: str
    namespaced: bool


@dataclass
class CallCounts:
    reads: int = 0
    writes: int = 0
    by_verb: dict[str, int] = field(default_factory=dict)
    throttled: int = 0  # requests that waited for the client's rate limit
    waited: float = 0.0  # seconds they waited in all
    # (calls made at once, fleet.k8s.parallel, count from several threads)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False, compare=False)

    def add(self, verb: str, wait: float = 0.0) -> None:
        """One call of ``verb``, which waited ``wait`` seconds for the rate limit first."""
        with self._lock:
            self.by_verb[verb] = self.by_verb.get(verb, 0) + 1
            if verb in ("get", "list"):
                self.reads += 1
            else:
                self.writes += 1
            if wait > 0:
                self.throttled += 1
                self.waited += wait


def _translate(exc: Exception, what: str) -> RuntimeAPIError:
    if isinstance(exc, ApiException):
        status = exc.status or 0
        reason = ""
        message = exc.reason or ""
        try:
            body = json.loads(exc.body or "{}")
            reason, message = body.get("reason", ""), body.get("message", message)
        except (TypeError, ValueError):
            pass
        text = f"{what}: {status} {message}".strip()
        if status == 404:
            return Gone(text, status=status, reason=reason)
        if status == 409:
            return Exists(text, status=status, reason=reason)
        if status == 500 and TYPED_PATCH_FAILED in message:
            # Server-side apply of a manifest that does not fit the kind's schema (a number where
            # a ConfigMap wants a string): the API server answers 500, yet no retry can help.
            return Permanent(text, status=status, reason=reason or "Invalid")
        if status == 429 or status >= 500 or status == 0:
            return Temporary(text, status=status, reason=reason)
        return Permanent(text, status=status, reason=reason)
    return Temporary(f"{what}: {type(exc).__name__}: {exc}")


ObjectKey = tuple[str, str, str, str]  # apiVersion, kind, namespace, name


def _builtin(api_version: str, namespaced: str, cluster: str = "") -> dict[tuple[str, str], ResourceInfo]:
    """``"Kind:plural ..."`` lists of one group version: namespaced kinds, then cluster-scoped."""
    table = {}
    for names, scoped in ((namespaced, True), (cluster, False)):
        for entry in names.split():
            kind, _, plural = entry.partition(":")
            table[(api_version, kind)] = ResourceInfo(plural, scoped)
    return table


# Kubernetes' GA built-in kinds the control plane writes (and module manifests use most), whose
# plural and scope every conformant API server serves alike: known without discovery. A
# runtime's first reconcile (a new client) otherwise spent a round trip per group version on them
# (bench/fleet.py, 10,000 runtimes at 50 ms: a quarter of the workers' waiting threads were in
# discovery). Other kinds, custom resources included (Kyma, module CRs), are still discovered.
BUILTIN_RESOURCES: dict[tuple[str, str], ResourceInfo] = {
    **_builtin(
        "v1",
        "ConfigMap:configmaps Event:events Pod:pods Secret:secrets Service:services "
        "ServiceAccount:serviceaccounts",
        "Namespace:namespaces",
    ),
    **_builtin("apps/v1", "Deployment:deployments"),
    **_builtin(
        "rbac.authorization.k8s.io/v1",
        "Role:roles RoleBinding:rolebindings",
        "ClusterRole:clusterroles ClusterRoleBinding:clusterrolebindings",
    ),
    **_builtin(
        "admissionregistration.k8s.io/v1",
        "",
        "MutatingWebhookConfiguration:mutatingwebhookconfigurations "
        "ValidatingWebhookConfiguration:validatingwebhookconfigurations",
    ),
    **_builtin("apiextensions.k8s.io/v1", "", "CustomResourceDefinition:customresourcedefinitions"),
    **_builtin("networking.k8s.io/v1", "NetworkPolicy:networkpolicies"),
    **_builtin("scheduling.k8s.io/v1", "", "PriorityClass:priorityclasses"),
}


class RateLimit:
    """A token bucket, as client-go's: ``RUNTIME_CLIENT_QPS`` requests a second in the steady
    state, up to ``RUNTIME_CLIENT_BURST`` at once after a quiet while (upstream's SKR client: 50
    and 100). :meth:`take` returns how long the caller must wait first (0 most of the time); the
    token is reserved at once, so concurrent callers queue up in turn (thread-safe)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._tokens: float | None = None  # full at the first request
        self._at = 0.0

    def take(self) -> float:
        qps, burst = settings.RUNTIME_CLIENT_QPS, settings.RUNTIME_CLIENT_BURST
        if qps <= 0:
            return 0.0
        with self._lock:
            now = self._clock()
            tokens = burst if self._tokens is None else min(burst, self._tokens + (now - self._at) * qps)
            self._tokens, self._at = tokens - 1, now
            return 0.0 if self._tokens >= 0 else -self._tokens / qps


class JSONApiClient(k8s.ApiClient):
    """The ``kubernetes`` client's ``ApiClient`` for request bodies that are JSON data already.

    Before it sends a body the client walks all of it (``sanitize_for_serialization``), to turn
    its own model objects and dates into JSON data. This module sends dicts and lists of JSON
    data only (documents rendered here, or read from JSON columns, or from YAML whose timestamps
    stay strings: ``kernel.documents.yamlio``), and that walk was 3 % of a worker's CPU of a
    first reconcile (py-spy --gil over first reconciles as ``bench/fleet.py`` runs them, which
    write a Deployment, webhooks and CRDs). So dicts and lists go as they are; anything else
    is walked as before. A body that is not JSON data after all fails as it would have failed
    to encode anyway, with a clear error (:meth:`RuntimeClient._exchange`)."""

    def sanitize_for_serialization(self, obj: Any) -> Any:
        if isinstance(obj, dict | list):
            return obj
        return super().sanitize_for_serialization(obj)


class RuntimeClient:
    """Calls to one runtime, with its own connection pool (kept alive between reconciles),
    discovery cache, rate limit (:class:`RateLimit`) and call counts."""

    def __init__(self, api_client: k8s.ApiClient) -> None:
        self.api = api_client
        self.counts = CallCounts()
        self.rate = RateLimit()
        self._resources: dict[tuple[str, str], ResourceInfo] = dict(BUILTIN_RESOURCES)
        self._timeout = (settings.RUNTIME_CONNECT_TIMEOUT, settings.RUNTIME_READ_TIMEOUT)

    @classmethod
    def from_kubeconfig(cls, kubeconfig: str) -> RuntimeClient:
        docs = load_documents(kubeconfig, source="kubeconfig", stored=True)  # validated when set
        configuration = k8s.Configuration()
        k8s_config.load_kube_config_from_dict(docs[0], client_configuration=configuration)
        configuration.retries = urllib3.Retry(total=0, connect=1, read=0, redirect=0)
        # (calls made at once, fleet.k8s.parallel, each hold a connection of their own)
        configuration.connection_pool_maxsize = settings.RUNTIME_PARALLEL_CALLS
        if not _credentials_expire(docs[0]):
            # The client's hook loads the credentials again before every request, for those that
            # expire (an exec plugin's, an auth provider's); a static token or client certificate
            # never changes, and the hook cost 1.5 % of a no-op reconcile's CPU (bench/fleet.py).
            configuration.refresh_api_key_hook = None
        return cls(JSONApiClient(configuration))

    def close(self) -> None:
        self.api.close()

    def _pools(self) -> list[Any]:
        """urllib3's connection pools of this client (one per runtime address); each holds a queue
        of its idle connections, and ``None`` for each it may still open."""
        pools = self.api.rest_client.pool_manager.pools
        found = (pools.get(key) for key in pools.keys())  # noqa: SIM118 - (it refuses iteration; keys() copies)
        return [pool for pool in found if pool is not None and pool.pool is not None]

    def idle_connections(self) -> int:
        """Connections to the runtime open and idle now: calls made at once use them without a
        handshake (:mod:`fleet.k8s.parallel`)."""
        return sum(_idle_in(pool) for pool in self._pools())

    def keep_one_connection(self) -> None:
        """Close the idle connections to the runtime but one: calls made at once
        (:mod:`fleet.k8s.parallel`) opened them for one reconcile, and a worker keeps a client for
        each of thousands of runtimes (a closed one becomes ``None`` in its pool again)."""
        for pool in self._pools():
            if _idle_in(pool) <= 1:
                continue  # (a reconcile that made no calls at once: nothing to close)
            held: list[Any] = []
            with contextlib.suppress(queue.Empty):
                while True:
                    held.append(pool.pool.get(block=False))
            kept = False
            for connection in held:
                if connection is not None and not kept:
                    kept = True
                elif connection is not None:
                    connection.close()
                    connection = None
                pool.pool.put(connection, block=False)

    def reset_counts(self) -> None:
        self.counts = CallCounts()

    # --- plumbing -----------------------------------------------------------------------------

    def _call(self, verb: str, method: str, path: str, **request: Any) -> Any:
        """The parsed answer of one call (see :meth:`_exchange`)."""
        return self._exchange(verb, method, path, **request)[1]

    def _exchange(
        self,
        verb: str,
        method: str,
        path: str,
        *,
        what: str,
        query: list | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> tuple[int, Any]:
        """(HTTP status, parsed answer) of one call, once the rate limit lets it go."""
        wait = self.rate.take()
        self.counts.add(verb, wait)
        if wait > 0:
            time.sleep(wait)
        try:
            response = self.api.call_api(
                path,
                method,
                query_params=query or [],
                header_params={"Accept": "application/json", "Content-Type": content_type},
                body=body,
                auth_settings=["BearerToken"],
                _preload_content=False,
                _return_http_data_only=True,
                _request_timeout=self._timeout,
            )
        except (ApiException, urllib3.exceptions.HTTPError, OSError) as exc:
            raise _translate(exc, what) from exc
        except TypeError as exc:
            if _is_json(body):
                raise
            raise Permanent(f"{what}: the body is not JSON data: {exc}") from exc  # (JSONApiClient)
        data = response.data
        return response.status, json.loads(data) if data else {}

    @staticmethod
    def _prefix(api_version: str) -> str:
        return f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"

    def resource(self, api_version: str, kind: str) -> ResourceInfo:
        """Plural and scope of a kind: a built-in one's are known (``BUILTIN_RESOURCES``), others
        come from discovery (cached per client)."""
        key = (api_version, kind)
        if key not in self._resources:
            try:
                listing = self._call("get", "GET", self._prefix(api_version), what=f"discover {api_version}")
            except Gone as exc:
                raise Gone(f"the runtime does not serve {kind} in {api_version}", status=404) from exc
            for item in listing.get("resources", []):
                if "/" not in item.get("name", ""):
                    self._resources[(api_version, item["kind"])] = ResourceInfo(
                        item["name"], item["namespaced"]
                    )
            if key not in self._resources:
                raise Gone(
                    f"the runtime does not serve {kind} in {api_version}", status=404, reason="NotFound"
                )
        return self._resources[key]

    def knows(self, api_version: str, kind: str) -> bool:
        """Whether a kind's plural and scope are known without a call (built in, learnt, discovered)."""
        return (api_version, kind) in self._resources

    def learn(self, crd: dict[str, Any]) -> None:
        """Plural and scope of a CRD's kinds, from the definition itself: for a CRD the control plane
        installs (the Kyma's), whose names it decides, discovery would only echo them back."""
        spec = crd["spec"]
        group, names = spec["group"], spec["names"]
        info = ResourceInfo(names["plural"], spec.get("scope") == "Namespaced")
        for version in spec.get("versions") or ():
            if version.get("served", True):
                self._resources[(f"{group}/{version['name']}", names["kind"])] = info

    def _path(self, api_version: str, kind: str, namespace: str | None, name: str | None = None) -> str:
        info = self.resource(api_version, kind)
        path = self._prefix(api_version)
        if info.namespaced:
            path += f"/namespaces/{namespace or 'default'}"
        path += f"/{info.plural}"
        return f"{path}/{name}" if name else path

    # --- typed helpers --------------------------------------------------------------------------

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> dict | None:
        """The object, or ``None`` when it (or its resource type) does not exist."""
        try:
            return self._call(
                "get",
                "GET",
                self._path(api_version, kind, namespace, name),
                what=f"get {kind} {namespace or ''}/{name}",
            )
        except Gone:
            return None

    def list(
        self, api_version: str, kind: str, namespace: str | None = None, *, labels: str = ""
    ) -> list[dict]:
        query = [("labelSelector", labels)] if labels else []
        result = self._call(
            "list", "GET", self._path(api_version, kind, namespace), query=query, what=f"list {kind}"
        )
        return result.get("items", [])

    def apply(self, obj: dict, *, force: bool = True) -> dict:
        """Server-side apply with the control plane's field manager (creates when missing)."""
        return self.apply_created(obj, force=force)[0]

    def apply_created(self, obj: dict, *, force: bool = True) -> tuple[dict, bool]:
        """:meth:`apply`, and whether it created the object (the API server answers 201)."""
        meta = obj["metadata"]
        query = [("fieldManager", field_manager()), ("force", "true" if force else "false")]
        path = self._path(obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"])
        status, answer = self._exchange(
            "apply",
            "PATCH",
            path,
            query=query,
            body=obj,
            content_type=APPLY,
            what=f"apply {obj['kind']} {meta.get('namespace', '')}/{meta['name']}",
        )
        return answer, status == 201

    def create(self, obj: dict) -> dict:
        meta = obj["metadata"]
        path = self._path(obj["apiVersion"], obj["kind"], meta.get("namespace"))
        return self._call(
            "create",
            "POST",
            path,
            query=[("fieldManager", field_manager())],
            body=obj,
            what=f"create {obj['kind']} {meta.get('namespace', '')}/{meta['name']}",
        )

    def patch(
        self,
        api_version: str,
        kind: str,
        name: str,
        namespace: str | None,
        patch: dict,
        *,
        field_manager: str,
    ) -> dict:
        """A JSON merge patch, as ``kubectl patch --type=merge`` (lists are replaced whole)."""
        return self._call(
            "patch",
            "PATCH",
            self._path(api_version, kind, namespace, name),
            query=[("fieldManager", field_manager)],
            body=patch,
            content_type=MERGE,
            what=f"patch {kind} {namespace or ''}/{name}",
        )

    def replace_managed_fields(
        self,
        api_version: str,
        kind: str,
        name: str,
        namespace: str | None,
        entries: list[dict],
        *,
        resource_version: str,
    ) -> dict:
        """Set ``metadata.managedFields`` as given (a JSON patch guarded by ``resource_version``):
        how ownership of fields moves from one manager to another (kubectl's csaupgrade)."""
        return self._call(
            "patch",
            "PATCH",
            self._path(api_version, kind, namespace, name),
            body=[
                {"op": "test", "path": "/metadata/resourceVersion", "value": resource_version},
                {"op": "replace", "path": "/metadata/managedFields", "value": entries},
            ],
            content_type=JSON_PATCH,
            what=f"take over the fields of {kind} {namespace or ''}/{name}",
        )

    def patch_status(
        self, api_version: str, kind: str, name: str, namespace: str | None, status: dict
    ) -> dict:
        path = self._path(api_version, kind, namespace, name) + "/status"
        return self._call(
            "patch",
            "PATCH",
            path,
            query=[("fieldManager", field_manager())],  # else the client's user agent
            body={"status": status},
            content_type=MERGE,
            what=f"update status of {kind} {namespace or ''}/{name}",
        )

    def delete(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> bool:
        """Delete; False when it was already gone."""
        try:
            self._call(
                "delete",
                "DELETE",
                self._path(api_version, kind, namespace, name),
                body={"propagationPolicy": "Background"},
                what=f"delete {kind} {namespace or ''}/{name}",
            )
        except Gone:
            return False
        return True

    def delete_pending(
        self, api_version: str, kind: str, name: str, namespace: str | None = None
    ) -> dict | None:
        """Delete; the object when it is still there, waiting for its finalizers (``None`` when
        it is gone, or was already)."""
        try:
            answer = self._call(
                "delete",
                "DELETE",
                self._path(api_version, kind, namespace, name),
                body={"propagationPolicy": "Background"},
                what=f"delete {kind} {namespace or ''}/{name}",
            )
        except Gone:
            return None
        meta = answer.get("metadata") or {}
        return answer if meta.get("deletionTimestamp") and meta.get("finalizers") else None

    def remove_finalizers(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> bool:
        """Drop every finalizer of an object being deleted, so that it goes (a purge: whoever
        set them is gone for good); False when the object was gone already."""
        try:
            unfinalized = {"metadata": {"finalizers": None}}
            self.patch(api_version, kind, name, namespace, unfinalized, field_manager=field_manager())
        except Gone:
            return False
        return True

    def ensure_namespace(self, name: str, labels: dict[str, str]) -> bool:
        """Create the namespace when missing; True when it was created. An existing one is only
        read, never written: the runtime's guard refuses the control plane any change of the
        namespaces it runs in (``reconciler.access``). The create is an apply of just its name
        and ``labels``, which the runtime's RBAC can allow for this one name, unlike a POST."""
        if self.get("v1", "Namespace", name) is not None:
            return False
        doc = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}
        return self.apply_created(doc)[1]


def _is_json(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def _idle_in(pool: Any) -> int:
    """Idle connections in one of urllib3's pools (its queue holds them, and ``None`` for each
    connection it may still open)."""
    return sum(1 for connection in list(pool.pool.queue) if connection is not None)


def _credentials_expire(kubeconfig: Any) -> bool:
    """Whether a user of the kubeconfig gets credentials that expire (an exec plugin, an auth
    provider): the kubernetes client then refreshes them before a request."""
    users = kubeconfig.get("users") if isinstance(kubeconfig, dict) else None
    return any(
        isinstance(entry, dict)
        and isinstance(entry.get("user"), dict)
        and ("exec" in entry["user"] or "auth-provider" in entry["user"])
        for entry in users or ()
    )


class ClientCache:
    """One client per Kyma per worker process, dropped when the kubeconfig changes (LRU bound)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._clients: OrderedDict[int, tuple[str, RuntimeClient]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, kyma_id: int, digest: str, kubeconfig: Any) -> RuntimeClient:
        with self._lock:
            entry = self._clients.get(kyma_id)
            if entry is not None and entry[0] == digest:
                self._clients.move_to_end(kyma_id)
                return entry[1]
        client = RuntimeClient.from_kubeconfig(kubeconfig.reveal())
        with self._lock:
            old = self._clients.pop(kyma_id, None)
            self._clients[kyma_id] = (digest, client)
            evicted = [
                self._clients.popitem(last=False)[1][1] for _ in range(max(0, len(self._clients) - self.size))
            ]
        for stale in ([old[1]] if old else []) + evicted:
            stale.close()
        return client

    def drop(self, kyma_ids: Iterable[int]) -> None:
        with self._lock:
            gone = [self._clients.pop(kyma_id)[1] for kyma_id in kyma_ids if kyma_id in self._clients]
        for client in gone:
            client.close()

    def __len__(self) -> int:
        return len(self._clients)


CLIENTS = ClientCache(size=1000)


def client_forget(kyma_id: int) -> None:
    """Close and forget the cached client of a Kyma that is gone (its connections with it)."""
    CLIENTS.drop([kyma_id])


def client_for(kyma_id: int, kubeconfig: Any) -> RuntimeClient:
    """The cached client of a Kyma (``kubeconfig`` is a Sealed value; its digest keys the cache)."""
    CLIENTS.size = settings.RUNTIME_CLIENT_CACHE
    return CLIENTS.get(kyma_id, kubeconfig.digest(), kubeconfig)
