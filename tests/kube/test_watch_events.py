"""The runtime watcher as a real API server calls it: a user's edit of the runtime's Kyma, and of a
module CR, made through the real kube-apiserver, reaches our runtime watcher as an AdmissionReview
the API server itself sends (through the skr-webhook configuration, Service and EndpointSlice:
envtest.node stands in for the kubelet and the pod network), then the listener (mutual TLS), the
broker, a Celery worker and the Kyma's reconcile, all real processes."""

from __future__ import annotations

import pytest

from fleet.models import Kyma, ModuleConfig
from fleet.services import modules as module_services
from listener.models import WatchEventRecord
from pki import services as pki
from tests.support.kube import Runtime, connect_kyma
from tests.support.listener import start_listener
from tests.support.processes import eventually, start_beat, start_worker
from tests.support.runtimes import keda_module, klm_watcher
from watchers.rendering import PRIORITY_CLASS_NAME

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def control_plane():
    pki.ca_bootstrap()
    klm_watcher()
    keda_module()
    listener = start_listener()
    started = [listener.process]
    try:
        settings = {
            "WATCHER_KCP_ADDR": f"localhost:{listener.port}",
            "WATCHER_HEARTBEAT_INTERVAL": "1",
            "RECONCILE_PROCESSING_INTERVAL": "1",
            "RECONCILE_READY_INTERVAL": "3600",
        }
        started.append(start_worker(concurrency=2, **settings))
        # Beat's sweep reconciles a Kyma again while it is Processing (its watcher becomes Ready
        # at its readiness probe's period, as the kubelet probes it), as in production.
        started.append(start_beat(**settings))
        yield started
    finally:
        for process in reversed(started):
            process.stop()


def webhook_calls(runtime: Runtime) -> int:
    """AdmissionReviews the API server sent to our watcher, by the watcher's own count."""
    pod = runtime.node.process("kyma-system", "skr-webhook")
    return 0 if pod is None else pod.log.read_text().count("kcp request succeeded")


def test_edits_through_the_real_api_server_reach_the_reconcile(real_runtime, control_plane):
    kyma = connect_kyma(real_runtime)
    eventually(
        lambda: ModuleConfig.objects.filter(kyma_id=kyma.pk).exists(), "keda's ModuleConfig", control_plane
    )
    config = ModuleConfig.objects.get(kyma_id=kyma.pk, module__name="keda")
    module_services.moduleconfig_set_status(config=config, status={"state": "Ready"})  # as its manager
    eventually(lambda: Kyma.objects.get(pk=kyma.pk).state == "Ready", "the Kyma Ready", control_plane, 180)
    # From now on only an event reconciles it (RECONCILE_READY_INTERVAL is an hour).
    assert not WatchEventRecord.objects.filter(kyma_id=kyma.pk, gvk_kind="Kyma").exists()

    # A user changes the runtime's Kyma with the API server (as kubectl would).
    real_runtime.call(
        "PATCH",
        real_runtime.path("operator.kyma-project.io/v1beta2", "kymas", "default", "kyma-system"),
        body={"spec": {"channel": "fast"}},
        content_type="application/merge-patch+json",
    )
    eventually(
        lambda: Kyma.objects.get(pk=kyma.pk).channel == "fast",
        "the control plane's copy follows the runtime's Kyma",
        control_plane,
    )
    eventually(
        lambda: WatchEventRecord.objects.filter(
            kyma_id=kyma.pk, gvk_kind="Kyma", watched_namespace="kyma-system", watched_name="default"
        ).exists(),
        "the event on record",
        control_plane,
        timeout=10,
    )

    # A user changes the module's CR: the module-crs webhook, the same path, its ModuleConfig.
    real_runtime.call(
        "PATCH",
        real_runtime.path("operator.kyma-project.io/v1alpha1", "kedas", "default", "kyma-system"),
        body={"spec": {"replicas": 3}},
        content_type="application/merge-patch+json",
    )

    def keda_replicas() -> object:
        return ModuleConfig.objects.get(kyma_id=kyma.pk, module__name="keda").spec.get("replicas")

    eventually(lambda: keda_replicas() == 3, "keda's ModuleConfig follows the runtime's CR", control_plane)
    eventually(
        lambda: WatchEventRecord.objects.filter(kyma_id=kyma.pk, gvk_kind="Keda").exists(),
        "the module CR's event on record",
        control_plane,
        timeout=10,
    )
    assert webhook_calls(real_runtime) >= 2
    # The control plane's own objects: a deleted PriorityClass is reported by the webhook for
    # owned objects, and the reconcile that event queues (a full one) puts it back at once.
    priority_class = ("scheduling.k8s.io/v1", "priorityclasses", PRIORITY_CLASS_NAME)
    real_runtime.call("DELETE", real_runtime.path(*priority_class))
    eventually(
        lambda: real_runtime.get(*priority_class) is not None,
        "the PriorityClass restored by the reconcile its deletion's event queued",
        control_plane,
        timeout=30,
    )
    eventually(  # the listener writes its records in batches, every second
        lambda: WatchEventRecord.objects.filter(kyma_id=kyma.pk, gvk_kind="PriorityClass").exists(),
        "the PriorityClass deletion's event on record",
        control_plane,
        timeout=10,
    )
