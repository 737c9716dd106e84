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

Module map: ``host`` (event loop, ports, TLS), ``emulator`` (HTTP layer), ``userapi`` (Python
access for tests), ``engine`` (write pipeline), ``build``/``defaults`` (object rules),
``fields`` (managed fields, apply), ``patches``, ``admission`` (webhooks), ``workloads``/``pods``
(deployment controller, kubelet hook), ``catalog``/``discovery``/``crds``, ``store``, ``watch``,
``selectors``, ``faults`` (fault injection, request counts), ``routes``, ``errors``.
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
