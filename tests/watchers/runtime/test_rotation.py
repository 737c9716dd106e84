"""Certificate files changing under a running watcher, the way a Secret volume update does."""

from __future__ import annotations

import logging
import time

from cryptography.hazmat.primitives.serialization import Encoding

from pki.crypto import certificate_to_pem
from tests.watchers.runtime.support import (
    TlsFiles,
    WebhookClient,
    create,
    metric,
    scrape,
    wait_until,
    write_atomically,
)

NO_SECRETS = ("BEGIN", "PRIVATE KEY")


def der(pair) -> bytes:
    return pair.certificate.public_bytes(Encoding.DER)


def test_webhook_serves_rotated_certificate_to_new_connections(watcher, webhook, tls_files, pki, caplog):
    caplog.set_level(logging.DEBUG, logger="watchers.runtime")
    webhook.review("kyma", create("before-rotation"))
    assert webhook.peer_certificate() == der(pki.runtime)
    tls_files.install(pki.runtime_rotated)

    def fresh_peer() -> bytes:
        client = WebhookClient(watcher.webhook_port, certificate_to_pem(pki.ca_old.certificate))
        try:
            client.review("kyma", create("probe"))
            return client.peer_certificate()
        finally:
            client.close()

    wait_until(lambda: fresh_peer() == der(pki.runtime_rotated))
    # the keep-alive connection opened before the rotation keeps working
    assert webhook.review("kyma", create("old-connection"))["response"]["allowed"] is True
    assert metric(scrape(watcher.metrics_port), "watcher_tls_reloads_total", result="success") == 1
    assert not any(marker in caplog.text for marker in NO_SECRETS)


def test_sender_reconnects_with_rotated_client_certificate(
    watcher, webhook, listener, tls_files, pki, caplog
):
    caplog.set_level(logging.DEBUG, logger="watchers.runtime")
    webhook.review("kyma", create("old-cert"))
    assert listener.wait_for_event("old-cert").client_cn == "runtime-1"
    tls_files.install(pki.runtime_rotated)
    wait_until(lambda: watcher.tls.current().generation == 2)
    webhook.review("kyma", create("new-cert"))
    record = listener.wait_for_event("new-cert")
    assert record.client_cn == "runtime-1-rotated"
    assert record.connection == 2
    assert listener.connections == 2
    assert not any(marker in caplog.text for marker in NO_SECRETS)


def test_ca_bundle_update_lets_the_watcher_trust_a_new_listener_ca(
    start_watcher, client_for, listener, pki, tmp_path
):
    files = TlsFiles.write(tmp_path / "ca-rotation", certificate_to_pem(pki.ca_old.certificate), pki.runtime)
    server = start_watcher(files=files)
    client_for(server).review("kyma", create("needs-new-ca"))
    wait_until(lambda: metric(scrape(server.metrics_port), "watcher_events_failed_total", reason="tls") >= 1)
    write_atomically(files.ca, pki.bundle_pem)  # the control plane added its new CA to the bundle
    listener.wait_for_event("needs-new-ca")
    # the listener has it; the sender counts it done once the answer is read
    wait_until(lambda: metric(scrape(server.metrics_port), "watcher_send_queue_depth") == 0)


def test_broken_update_keeps_the_previous_material(watcher, webhook, listener, tls_files, pki, caplog):
    caplog.set_level(logging.INFO, logger="watchers.runtime")
    write_atomically(tls_files.cert, b"-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n")
    wait_until(lambda: metric(scrape(watcher.metrics_port), "watcher_tls_reloads_total", result="error") == 1)
    # still serving and delivering with the previous certificate
    fresh = WebhookClient(watcher.webhook_port, certificate_to_pem(pki.ca_old.certificate))
    try:
        fresh.review("kyma", create("still-working"))
        assert fresh.peer_certificate() == der(pki.runtime)
    finally:
        fresh.close()
    assert listener.wait_for_event("still-working").client_cn == "runtime-1"
    # the broken version is reported once, not on every check (several 0.05 s checks pass here)
    time.sleep(0.3)
    assert len([r for r in caplog.records if "reload failed" in r.getMessage()]) == 1
    # a good update afterwards is picked up
    tls_files.install(pki.runtime_rotated)
    wait_until(
        lambda: metric(scrape(watcher.metrics_port), "watcher_tls_reloads_total", result="success") == 1
    )
    assert not any(marker in caplog.text for marker in NO_SECRETS)
