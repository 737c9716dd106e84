"""The Istio ingress gateway's credential, kept current by the control plane itself.

Behind Istio the ingress gateway ends the runtime watchers' mutual TLS with a Secret of its own
namespace (the Gateway's ``credentialName``): ``tls.crt``/``tls.key``, the server certificate it
presents, and ``ca.crt``, the CAs client certificates must chain to. Upstream's lifecycle-manager
keeps that Secret current with its ``istiogatewaysecret`` controller (requeued every 5 minutes);
so does :func:`gateway_secret_sync`, run by the workers every ``GATEWAY_SECRET_INTERVAL`` seconds
and at once after a CA rotation or a renewed listener certificate (``pki.maintain``):

- ``ca.crt`` is the PKI's bundle, every CA that has joined and not expired: after a rotation the
  old CA and the new one, so runtimes not re-issued yet keep being accepted while the new
  certificates go out (at once, to every runtime: :func:`pki.services.ca_rotate` makes them due);
  the old CA leaves when it expires, as upstream drops expired CAs.
- ``tls.crt``/``tls.key`` is the listener's server certificate, from the *serving* CA: the old one
  until ``PKI_CA_GRACE_DAYS`` (4 days, upstream's ``--istio-gateway-server-cert-switch-grace-
  period``) after the rotation, so runtimes that still trust only the old CA can reach the
  gateway meanwhile; renewed ``PKI_CERT_RENEW_BEFORE_DAYS`` before it expires.

The Secret is written only when its content differs (server-side apply with the control plane's
field manager, creating it when missing), with the in-cluster identity of
:mod:`fleet.k8s.incluster`, whose only right is this one Secret (``deploy/kubernetes/components/
gateway-secret``). What it holds is recorded in :class:`~pki.models.GatewaySecretState` for the
metrics and the dashboard. ``manage.py render_gateway --with-credential`` prints the same Secret
(:func:`credential_secret`) for GitOps users who write it themselves.
"""

from __future__ import annotations

import base64
import datetime as dt
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from celery import current_app as celery_app
from django.conf import settings
from django.db import transaction
from django.utils import timezone
from kombu.exceptions import OperationalError as KombuOperationalError

from fleet.k8s.client import RuntimeAPIError, RuntimeClient
from fleet.k8s.incluster import in_cluster_client

from . import crypto, selectors, services
from .models import GatewaySecretState

log = logging.getLogger(__name__)

MANAGED_BY = {"operator.kyma-project.io/managed-by": "kyma"}
CERTIFICATE_ANNOTATION = "controlplane.kyma-project.io/server-certificate"
GATEWAY_TASK = "pki.gateway_secret_sync"


def credential_secret(
    *,
    cert: bytes,
    key: bytes,
    ca_bundle: bytes,
    name: str | None = None,
    namespace: str | None = None,
) -> dict[str, Any]:
    """The Gateway's ``credentialName`` Secret: server certificate, key and the client CA bundle.

    Istio reads ``tls.crt``/``tls.key`` and, for MUTUAL, ``ca.crt`` from one Secret in the ingress
    gateway's namespace (``GATEWAY_SECRET_NAME`` in ``GATEWAY_SECRET_NAMESPACE`` by default).
    """
    data = {"tls.crt": cert, "tls.key": key, "ca.crt": ca_bundle}
    fingerprint = crypto.fingerprint_sha256(crypto.load_certificate(cert))
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": name or settings.GATEWAY_SECRET_NAME,
            "namespace": namespace or settings.GATEWAY_SECRET_NAMESPACE,
            "labels": dict(MANAGED_BY),
            "annotations": {CERTIFICATE_ANNOTATION: fingerprint},
        },
        "type": "Opaque",
        "data": {k: base64.b64encode(v).decode() for k, v in data.items()},
    }


def desired_secret(now: dt.datetime | None = None) -> dict[str, Any]:
    """The Secret as it should be now (a listener certificate issued or renewed on the way)."""
    services.ca_bootstrap(now=now)
    cert = services.listener_certificate(now=now)
    return credential_secret(
        cert=cert.certificate_pem.encode(),
        key=cert.private_key.reveal_bytes(),
        ca_bundle=selectors.ca_bundle_pem(now),
    )


@dataclass(frozen=True)
class SyncResult:
    written: bool
    fingerprint: str
    not_after: dt.datetime
    bundle: list[str]


def _held(data: Mapping[str, str] | None) -> dict[str, str]:
    return dict(data or {})


def gateway_secret_sync(*, client: RuntimeClient | None = None, now: dt.datetime | None = None) -> SyncResult:
    """Make the gateway's Secret hold the current credential; record what it holds. ``client``:
    the cluster the gateway runs in (default: this pod's own, :mod:`fleet.k8s.incluster`).

    Raises :class:`~fleet.k8s.client.RuntimeAPIError` when the cluster cannot be read or written
    (recorded first, for the metrics); the caller retries after ``GATEWAY_SECRET_RETRY``.
    """
    now = now or timezone.now()
    desired = desired_secret(now)
    meta = desired["metadata"]
    state, _ = GatewaySecretState.objects.get_or_create(namespace=meta["namespace"], name=meta["name"])
    try:
        client = client or in_cluster_client()
        live = client.get("v1", "Secret", meta["name"], meta["namespace"])
        written = live is None or _held(live.get("data")) != desired["data"]
        if written:
            client.apply(desired)
    except RuntimeAPIError as exc:
        state.last_error, state.error_at = exc.message[:2000], now
        state.save(update_fields=["last_error", "error_at"])
        raise
    cert = crypto.load_certificate(base64.b64decode(desired["data"]["tls.crt"]))
    bundle = [
        crypto.fingerprint_sha256(c)
        for c in crypto.load_certificates(base64.b64decode(desired["data"]["ca.crt"]))
    ]
    state.certificate_fingerprint = crypto.fingerprint_sha256(cert)
    state.certificate_not_after = cert.not_valid_after_utc
    state.bundle_fingerprints = bundle
    state.synced_at, state.last_error, state.error_at = now, "", None
    if written:
        state.written_at, state.writes = now, state.writes + 1
        log.info(
            "wrote the gateway's Secret %s/%s: server certificate %s, %d CA(s) in the bundle",
            meta["namespace"],
            meta["name"],
            state.certificate_fingerprint,
            len(bundle),
        )
    state.save()
    return SyncResult(written, state.certificate_fingerprint, state.certificate_not_after, bundle)


def gateway_secret_states() -> list[GatewaySecretState]:
    return list(GatewaySecretState.objects.order_by("namespace", "name"))


def gateway_secret_sync_request() -> None:
    """Write the gateway's Secret soon (after this transaction), where the control plane keeps it
    (``GATEWAY_SECRET_SYNC``); the periodic run catches up if the broker refuses now."""
    if not settings.GATEWAY_SECRET_SYNC:
        return

    def send() -> None:
        try:
            celery_app.send_task(GATEWAY_TASK, retry=True)
        except (KombuOperationalError, OSError) as exc:
            log.warning("gateway Secret sync not queued (the periodic one will do it): %s", exc)

    transaction.on_commit(send)
