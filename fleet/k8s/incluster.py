"""The cluster the control plane runs in, reached with the pod's own ServiceAccount.

The control plane reaches its runtimes through their kubeconfigs; its own cluster it touches for
one duty only, as upstream's lifecycle-manager does: keeping the Istio ingress gateway's credential
Secret current (:mod:`pki.gateway`). The identity is the pod's projected ServiceAccount token (the
kubelet refreshes the file; the client reads it again every minute) and the address the one every
pod is given (``KUBERNETES_SERVICE_HOST``/``KUBERNETES_SERVICE_PORT``). Calls go through
:class:`~fleet.k8s.client.RuntimeClient`, so callers see the same Gone/Exists/Temporary/Permanent
errors and never an HTTP status; a pod without that identity gets :class:`NotInCluster`.
"""

from __future__ import annotations

import threading

import urllib3
from kubernetes import client as k8s
from kubernetes.config.config_exception import ConfigException
from kubernetes.config.incluster_config import (
    SERVICE_CERT_FILENAME,
    SERVICE_TOKEN_FILENAME,
    InClusterConfigLoader,
)

from .client import JSONApiClient, Permanent, RuntimeClient

_lock = threading.Lock()
_client: RuntimeClient | None = None


class NotInCluster(Permanent):
    """This process has no in-cluster identity (no ServiceAccount token mounted, or no
    ``KUBERNETES_SERVICE_HOST``): its pod was not given one."""


def in_cluster_client() -> RuntimeClient:
    """The process's client of its own cluster (made once, its token re-read as it rotates)."""
    global _client
    with _lock:
        if _client is None:
            configuration = k8s.Configuration()
            try:
                InClusterConfigLoader(
                    token_filename=SERVICE_TOKEN_FILENAME,
                    cert_filename=SERVICE_CERT_FILENAME,
                    try_refresh_token=True,
                ).load_and_set(configuration)
            except ConfigException as exc:
                raise NotInCluster(f"no in-cluster identity: {exc}") from exc
            configuration.retries = urllib3.Retry(total=0, connect=1, read=0, redirect=0)
            _client = RuntimeClient(JSONApiClient(configuration))
        return _client


def in_cluster_client_forget() -> None:
    """Drop the cached client (tests; a process whose identity changed)."""
    global _client
    with _lock:
        if _client is not None:
            _client.close()
        _client = None
