"""The runtime-watcher objects' content hashes, remembered per process by what each object is made
of (``watchers.rendering``): every document is what its function renders, stamped afresh, and
anything its content depends on gives another document and hash."""

from __future__ import annotations

import copy

import pytest

from kernel.documents.hashing import stamped
from pki.crypto import content_hash
from tests.factories import WatcherFactory
from watchers import rendering
from watchers.rendering import WatcherConfig, runtime_watcher_resources

pytestmark = pytest.mark.django_db

TLS = {"ca.crt": b"ca", "tls.crt": b"crt", "tls.key": b"key"}
KINDS = [("operator.kyma-project.io", "v1alpha1", "kedas")]
OWNED = [("scheduling.k8s.io", "v1", "priorityclasses", False)]


def render(watchers, tls=TLS, kinds=KINDS, owned=OWNED, config=None) -> dict[str, dict]:
    docs = runtime_watcher_resources(
        watchers=watchers, tls=tls, module_kinds=kinds, owned_kinds=owned, config=config
    )
    return {f"{doc['kind']}/{doc['metadata']['name']}": doc for doc in docs}


def hashes_hold(docs: dict[str, dict], watchers, tls=TLS, kinds=KINDS, owned=OWNED, config=None) -> None:
    """Each document is what its own function renders, stamped afresh (nothing remembered)."""
    config = config or WatcherConfig.from_settings()
    fresh = [
        rendering.priority_class(),
        *rendering.network_policies(config),
        rendering.secret(tls),
        rendering.service(),
        rendering.metrics_service(),
        rendering.deployment(content_hash(tls["ca.crt"], tls["tls.crt"], tls["tls.key"]), config=config),
        rendering.webhook_configuration(watchers, tls["ca.crt"], kinds, owned),
    ]
    assert docs == {f"{doc['kind']}/{doc['metadata']['name']}": stamped(doc) for doc in fresh}


def test_given_the_same_inputs_then_equal_documents_each_time():
    watcher = WatcherFactory()
    first, second = render([watcher]), render([watcher])
    assert copy.deepcopy(first) == second
    hashes_hold(second, [watcher])


def test_given_a_caller_changed_its_documents_then_the_next_ones_are_whole():
    watcher = WatcherFactory()
    for doc in render([watcher]).values():
        del doc["metadata"]["annotations"]
        doc["metadata"]["labels"] = {}
    hashes_hold(render([watcher]), [watcher])


@pytest.mark.parametrize(
    ("change", "moved"),
    [
        ({"tls": {**TLS, "tls.key": b"other-key"}}, {"Secret/skr-webhook-tls", "Deployment/skr-webhook"}),
        (
            {"tls": {**TLS, "ca.crt": b"other-ca"}},
            {
                "Secret/skr-webhook-tls",
                "Deployment/skr-webhook",
                "ValidatingWebhookConfiguration/skr-webhook",
            },
        ),
        ({"kinds": []}, {"ValidatingWebhookConfiguration/skr-webhook"}),
        ({"owned": []}, {"ValidatingWebhookConfiguration/skr-webhook"}),
        (
            {"config": WatcherConfig("img:2", "kcp.example.com:8443", 30, "100m", "64Mi")},
            {"Deployment/skr-webhook"},
        ),
    ],
)
def test_given_an_input_changed_then_the_documents_made_of_it_change(change, moved):
    watcher = WatcherFactory()
    before = copy.deepcopy(render([watcher]))
    after = render([watcher], **change)
    hashes_hold(after, [watcher], **change)
    changed = {name for name in before.keys() | after.keys() if before.get(name) != after.get(name)}
    assert moved <= changed
    if "config" not in change:  # (new settings may also move the NetworkPolicy to the listener)
        assert changed == moved


def test_given_a_watcher_edited_then_the_webhook_configuration_follows():
    watcher = WatcherFactory()
    before = copy.deepcopy(render([watcher]))
    watcher.labels_to_watch = {"edited": "yes"}
    after = render([watcher])
    name = "ValidatingWebhookConfiguration/skr-webhook"
    assert after[name] != before[name]
    assert after[name]["webhooks"][0]["objectSelector"] == {"matchLabels": {"edited": "yes"}}
    hashes_hold(after, [watcher])
    assert render([])[name]["webhooks"] != after[name]["webhooks"]
