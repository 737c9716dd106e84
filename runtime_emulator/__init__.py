"""Loopback Kubernetes API emulator for tests, demos and benchmarks.

Thousands of emulated "runtime" clusters run in one process, each on its own loopback port,
and are talked to only through the official ``kubernetes`` client and a kubeconfig::

    from runtime_emulator import EmulatorHost, ServerTLS

    with EmulatorHost() as host:
        runtime = host.create("runtime-1")  # or tls=ServerTLS(cert_pem, key_pem, ca_pem)
        api_client = kubernetes.config.new_client_from_config_dict(runtime.kubeconfig())
        kubernetes.client.CoreV1Api(api_client).list_namespace()

Server-side apply with the ``kubernetes`` package
--------------------------------------------------
The client has no apply method for typed APIs; force the content type and always name a field
manager (``fieldManager`` is mandatory for apply, here as on a real server). The body is a plain
dict with ``apiVersion``, ``kind`` and ``metadata.name`` (and ``namespace``); the client
JSON-encodes it, which is valid YAML::

    apps.patch_namespaced_deployment(
        name, namespace, body=manifest,
        field_manager="kyma-control-plane", force=True,  # force: take over conflicting fields
        _content_type="application/apply-patch+yaml",
    )
    custom.patch_namespaced_custom_object(
        group, version, namespace, plural, name, body=manifest,
        field_manager="kyma-control-plane", force=True,
        _content_type="application/apply-patch+yaml",
    )
    api_client.call_api(
        path, "PATCH", path_params, query_params=[("fieldManager", "kcp"), ("force", "true")],
        header_params={"Content-Type": "application/apply-patch+yaml", "Accept": "application/json"},
        body=manifest, response_types_map={200: "object", 201: "object"},
        auth_settings=["BearerToken"], _return_http_data_only=True,
    )
    DynamicClient(api_client).resources.get(api_version=..., kind=...).server_side_apply(
        body=manifest, field_manager="kcp", force_conflicts=True)

Apply creates a missing object. Without ``force=True`` a field another manager set to a
different value (a ``kubectl edit``, an earlier create) is a 409 Conflict, exactly as on a real
server. Do not pass a dict body to a typed ``patch_*`` without ``_content_type``: the client then
sends a strategic merge patch, not an apply.

Held to a real API server
-------------------------
The contract suite (``tests/kube/contract``) runs the same cases against a real kube-apiserver
(the ``kube`` tier, ``envtest``) and against this emulator: server-side apply and managed fields,
typed and schema-checked writes (``schemas``, ``structural``), the status subresource,
generation, optimistic concurrency, lists and watches, deletion and discovery, admission webhooks
as the API server calls them, CRD validation and pruning, Pod Security and Priority admission.
Where they differ, the emulator is fixed; what is left, and why:

* **A resumed watch coalesces**: a watch from an older resourceVersion gets the latest state of
  each object changed since (in order, with a selection's entries and exits), not every
  intermediate version a real server replays. Keeping old versions would hold them alive in
  thousands of runtimes; a watch that is open sees every change, and the product does not watch.
* **No BOOKMARK events** and no ``sendInitialEvents`` (watch lists): ``allowWatchBookmarks`` is
  accepted and ignored, which the API allows (bookmarks are best effort).
* **Paging reads the present**: ``continue`` pages show the current objects, not a snapshot at the
  first page's resourceVersion (only writes between pages tell the difference).
* **Wording of some refusals**: an unparsable label selector is a 400 BadRequest as on a real
  server, but the message differs; so does a built-in kind's body of the wrong type outside an
  apply (a 400 "cannot be handled as a <Kind>", without Go's decoder message); the "got" part of
  an apply's typed errors is approximated.
* **CRDs**: CEL rules (``x-kubernetes-validations``) are not evaluated and conversion webhooks are
  not called (the versions of a custom resource share one stored object; a request through
  another version only changes its ``apiVersion``); validation ratcheting is approximated (an
  update is not refused for a cause its old object already had); defaults are not applied on read.
* **One identity, no RBAC**: every request with the emulator's token is the administrator
  (``kubernetes-admin``); least privilege is checked only against the real server (the ``kube``
  tier), as it needs the real authorizer.
* **Controllers and kinds**: only the built-in kinds the product uses are served; of a cluster's
  controllers only deployments, pods (through the kubelet hook) and namespace deletion are
  emulated, immediately: a new namespace gets no ``default`` ServiceAccount or ``kube-root-ca.crt``
  ConfigMap, Pods are not refused for a missing ServiceAccount, there are no EndpointSlices
  (webhook Services are reached through ``service_endpoints``), and what a real server does a
  moment later from its caches (a new webhook configuration or PriorityClass taking effect, a
  namespace going once emptied) happens at once.
* **Admission plugins**: of the built-in ones, PodSecurity (``restricted``, see ``podsecurity``),
  Priority and NamespaceLifecycle; no LimitRanger, ResourceQuota, ServiceAccount or others. Built-in
  kinds are validated for a few fields only (names, Deployments' selectors and containers). No
  ValidatingAdmissionPolicy either: policies are stored but their CEL is not evaluated, so the
  runtime-access guard of ``deploy/runtime-access/`` is not enforced here (the one identity is the
  administrator, whom the guard does not match anyway); ``tests/kube/test_runtime_access.py``
  probes it, as the control plane's identity, against the real server only.
* **Each write is reviewed once**: a real server may call validating webhooks twice for one update
  or deletion (it tries the write on its watch cache's copy first, and again on the current object
  when that copy was stale, as under load); the emulator reviews every write exactly once. The
  admission cases accept both: repeats of one review in a row count once.

Module map: ``host`` (event loop, ports, TLS), ``emulator`` (HTTP layer), ``userapi`` (Python
access for tests), ``engine`` (write pipeline), ``build``/``defaults`` (object rules),
``schemas``/``structural`` (each kind's schema: typed applies, pruning, CRD defaults and
validation), ``fields`` (managed fields, apply), ``patches``, ``admission`` (webhooks),
``workloads``/``pods`` (deployment controller, kubelet hook), ``podsecurity``,
``catalog``/``discovery``/``crds``, ``store``, ``watch``, ``selectors``, ``faults`` (fault
injection, request counts), ``routes``, ``errors``.
"""

from kmock import KubernetesError

from runtime_emulator.admission import UserInfo, WebhookCall
from runtime_emulator.catalog import ResourceType
from runtime_emulator.crds import crd_manifest
from runtime_emulator.emulator import RuntimeEmulator
from runtime_emulator.engine import Write
from runtime_emulator.faults import Faults, RequestCounts
from runtime_emulator.host import DEFAULT_NAMESPACES, EmulatorHost, ServerTLS
from runtime_emulator.pods import ContainerLaunch, PodHealth
from runtime_emulator.workloads import DeploymentChange, DeploymentEvent, Kubelet

__all__ = [
    "DEFAULT_NAMESPACES",
    "ContainerLaunch",
    "DeploymentChange",
    "DeploymentEvent",
    "EmulatorHost",
    "Faults",
    "Kubelet",
    "KubernetesError",
    "PodHealth",
    "RequestCounts",
    "ResourceType",
    "RuntimeEmulator",
    "ServerTLS",
    "UserInfo",
    "WebhookCall",
    "Write",
    "crd_manifest",
]
