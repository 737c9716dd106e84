"""Unreachable and unhealthy runtimes, deletion in order, and module manager notifications."""

from __future__ import annotations

import http.server
import json
import threading

import pytest

from fleet import notifications
from fleet.k8s.client import CLIENTS
from fleet.models import Kyma, ModuleConfig
from fleet.services import kymas as kyma_services
from pki import services as pki
from pki.models import Certificate
from reconciler.status import next_interval
from runtime_emulator import PodHealth
from tests.reconciler.helpers import conditions, reconcile
from tests.support.runtimes import connected_kyma, keda_module, klm_watcher

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def catalog():
    pki.ca_bootstrap()
    klm_watcher()
    return keda_module()


class TestUnreachable:
    def test_given_an_unreachable_runtime_then_error_with_backoff_while_others_stay_healthy(self, runtimes):
        down, up = runtimes(), runtimes()
        broken, healthy = connected_kyma(down, name="broken"), connected_kyma(up, name="healthy")
        reconcile(broken)
        reconcile(healthy)
        down.set_reachable(False)
        delays = []
        for _ in range(4):
            reconcile(broken)
            delays.append(round((broken.next_reconcile_at - broken.last_reconcile_at).total_seconds()))
        assert broken.state == "Error"
        assert conditions(broken)["Runtime"] == ("False", "Unreachable")
        assert delays == [5, 10, 20, 30]
        reconcile(healthy)
        assert healthy.state == "Processing" and healthy.error_streak == 0
        down.set_reachable(True)
        reconcile(broken)
        assert broken.state == "Processing" and broken.error_streak == 0
        assert conditions(broken)["Runtime"] == ("True", "Reachable")

    def test_given_server_errors_then_they_count_as_temporary(self, runtimes):
        runtime = runtimes()
        kyma = connected_kyma(runtime)
        runtime.faults.fail_requests(503, count=1000)
        reconcile(kyma)
        runtime.faults.clear()
        assert kyma.state == "Error" and conditions(kyma)["Runtime"][1] == "Unreachable"

    @pytest.mark.parametrize("interval_state", ["Ready", "Processing", "Warning", "Deleting"])
    def test_given_each_state_then_the_requeue_interval_follows_the_settings(self, interval_state, settings):
        expected = {"Ready": 300, "Processing": 5, "Warning": 30, "Deleting": 5}[interval_state]
        assert next_interval(interval_state, 0) == expected


class TestWatcherHealth:
    def test_given_a_crash_looping_watcher_then_error_not_ready(self, runtimes):
        runtime = runtimes()
        runtime.set_pod_health("kyma-system", "skr-webhook", PodHealth.crash_loop_backoff())
        kyma = connected_kyma(runtime)
        reconcile(kyma)
        assert kyma.state == "Error"
        assert conditions(kyma)["SKRWebhook"] == ("False", "WatcherFailing")

    def test_given_an_image_that_cannot_be_pulled_then_error(self, runtimes):
        runtime = runtimes()
        runtime.set_pod_health("kyma-system", "skr-webhook", PodHealth.image_pull_backoff("bad/image:1"))
        kyma = connected_kyma(runtime)
        reconcile(kyma)
        assert kyma.state == "Error" and "ImagePullBackOff" in kyma.last_operation["operation"]

    def test_given_a_watcher_not_ready_yet_then_processing(self, runtimes):
        runtime = runtimes()
        runtime.set_pod_health("kyma-system", "skr-webhook", PodHealth.unready("starting"))
        kyma = connected_kyma(runtime)
        reconcile(kyma)
        assert kyma.state == "Processing"
        assert conditions(kyma)["SKRWebhook"] == ("False", "WatcherNotReady")


class TestDeletion:
    def test_given_a_reconciled_kyma_when_deleted_then_every_runtime_object_goes_then_the_row(self, runtimes):
        runtime = runtimes()
        kyma = connected_kyma(runtime)
        reconcile(kyma)
        assert Certificate.objects.filter(kyma=kyma).exists()
        assert kyma.pk in CLIENTS._clients
        assert kyma_services.kyma_delete(kyma=kyma) is False
        assert reconcile(Kyma.objects.get(pk=kyma.pk)) is None
        assert not Kyma.objects.filter(pk=kyma.pk).exists()
        for resource, name, namespace in [
            ("validatingwebhookconfigurations", "skr-webhook", None),
            ("Deployment", "skr-webhook", "kyma-system"),
            ("Service", "skr-webhook", "kyma-system"),
            ("Secret", "skr-webhook-tls", "kyma-system"),
            ("Kyma", "default", "kyma-system"),
            ("Keda", "default", "kyma-system"),
        ]:
            assert runtime.get_object(resource, name, namespace) is None, resource
        assert not Certificate.objects.filter(kyma_id=kyma.pk).exists()
        assert kyma.pk not in CLIENTS._clients  # its client (and connections) went with it

    def test_given_an_unreachable_runtime_when_deleting_then_the_kyma_waits_in_error(self, runtimes):
        runtime = runtimes()
        kyma = connected_kyma(runtime)
        reconcile(kyma)
        kyma_services.kyma_delete(kyma=kyma)
        runtime.set_reachable(False)
        reconcile(kyma)
        assert kyma.state == "Error" and kyma.deletion_timestamp is not None
        runtime.set_reachable(True)
        assert reconcile(kyma) is None
        assert not Kyma.objects.filter(pk=kyma.pk).exists()


class Recorder(http.server.BaseHTTPRequestHandler):
    received: list[tuple[dict, bytes]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        Recorder.received.append((dict(self.headers), body))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        return


def test_given_a_changed_config_when_notified_then_the_manager_gets_a_verifiable_signature(runtimes):
    server = http.server.HTTPServer(("127.0.0.1", 0), Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        module = keda_module()
        module.manager_url = f"http://127.0.0.1:{server.server_port}/notify"
        module.notify_secret = "s3cret-key"
        module.save()
        kyma = connected_kyma(runtimes())
        reconcile(kyma)
        config = ModuleConfig.objects.get(kyma=kyma)
        Recorder.received.clear()
        assert notifications.module_manager_notify(config_id=config.pk) is True
        [(headers, body)] = Recorder.received
        assert headers["X-Controlplane-Signature"] == notifications.signature(
            b"s3cret-key", headers["X-Controlplane-Timestamp"], body
        )
        assert json.loads(body)["spec"]["resource"] == {"replicas": 1}
    finally:
        server.shutdown()


@pytest.mark.parametrize("notifies", [False, True])
def test_given_a_changed_config_then_only_a_manager_with_a_url_and_key_is_notified(
    runtimes, task_queue, notifies
):
    """Managers without them watch or poll: no task is queued for them."""
    module = keda_module()
    if notifies:
        module.manager_url, module.notify_secret = "http://127.0.0.1:9/notify", "s3cret-key"
        module.save()
    kyma = connected_kyma(runtimes())
    task_queue()
    reconcile(kyma)
    config = ModuleConfig.objects.get(kyma=kyma)
    sent = [task.args for task in task_queue() if task.name == "controlplane.notify_module_managers"]
    assert sent == ([[[config.pk]]] if notifies else [])
