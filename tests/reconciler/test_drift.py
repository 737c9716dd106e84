"""Which differences are drift: fields we set, compared with the live object (no runtime needed)."""

from __future__ import annotations

import copy

from reconciler.drift import drifted
from watchers.rendering import deployment, webhook_configuration

DESIRED = deployment("restart-1")


def live_copy() -> dict:
    """What an API server answers: our fields plus defaults, status and other metadata."""
    live = copy.deepcopy(DESIRED)
    live["metadata"].update(
        uid="u1", resourceVersion="7", labels={**live["metadata"]["labels"], "extra": "x"}
    )
    live["spec"]["strategy"] = {"type": "RollingUpdate"}
    live["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] = "IfNotPresent"
    live["status"] = {"readyReplicas": 1}
    return live


def test_given_only_server_defaults_and_status_then_no_drift():
    assert not drifted(DESIRED, live_copy())


def test_given_a_list_item_without_apiversion_and_kind_then_no_drift():
    live = live_copy()
    del live["apiVersion"], live["kind"]
    assert not drifted(DESIRED, live)


def test_given_a_managed_field_changed_then_drift():
    live = live_copy()
    live["spec"]["replicas"] = 0
    assert drifted(DESIRED, live)


def test_given_one_of_our_labels_changed_then_drift():
    live = live_copy()
    live["metadata"]["labels"]["app"] = "other"
    assert drifted(DESIRED, live)


def test_given_a_list_entry_removed_then_drift():
    desired = webhook_configuration([], b"ca")
    desired["webhooks"] = [{"name": "a"}, {"name": "b"}]
    live = copy.deepcopy(desired)
    live["webhooks"].pop()
    assert drifted(desired, live)
