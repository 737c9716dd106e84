"""Lists by label and field selector (how the control plane finds the runtime watcher's pods and
the objects it manages) and watches: every change as ADDED, MODIFIED or DELETED, a watch resumed
from a list's resourceVersion, and a selector's view of an object moving in and out of it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import kubernetes
import pytest

from tests.kube.contract.calls import Client, path

WATCH_SECONDS = 2  # a watch made while changes happen lasts this long
REPLAY_SECONDS = 1  # one that replays what already happened, this long


@pytest.fixture
def client(backend) -> Client:
    return Client(backend.api)


def names(answer) -> list[str]:
    return [item["metadata"]["name"] for item in answer.body["items"]]


def test_lists_select_by_label(client, ns):
    where = path("v1", "configmaps", ns)
    for name, labels in [("l1", {"app": "a", "tier": "x"}), ("l2", {"app": "b"}), ("l3", {"other": "y"})]:
        client.create(where, {"metadata": {"name": name, "labels": labels}})

    selected = {
        selector: names(client.list(where, labelSelector=selector))
        for selector in (
            "app=a",
            "app==a",
            "app!=a,other",
            "app in (a,b)",
            "app notin (a),other",
            "app",
            "!app,other",
        )
    }
    listing = client.list(where, labelSelector="app")
    by_field = client.list(where, fieldSelector="metadata.name=l2")
    bad_label = client.list(where, labelSelector="a b")
    bad_field = client.list(where, fieldSelector="data.k=v")

    assert selected == {
        "app=a": ["l1"],
        "app==a": ["l1"],
        "app!=a,other": ["l3"],
        "app in (a,b)": ["l1", "l2"],
        "app notin (a),other": ["l3"],
        "app": ["l1", "l2"],
        "!app,other": ["l3"],
    }
    assert listing.body["kind"] == "ConfigMapList"
    assert listing.body["metadata"]["resourceVersion"]
    assert names(by_field) == ["l2"]
    assert bad_label.status == 400
    assert bad_label.reason == "BadRequest"
    assert bad_label.message.startswith("unable to parse requirement: ")
    assert bad_field.status == 400
    assert (
        bad_field.message
        == '"data.k" is not a known field selector: only "metadata.name", "metadata.namespace"'
    )


def test_a_list_pages_with_limit_and_continue(client, ns):
    where = path("v1", "secrets", ns)  # (a new namespace holds none of its own)
    for index in range(5):
        client.create(where, {"metadata": {"name": f"p{index}", "labels": {"page": "yes"}}})

    first = client.list(where, limit="2")
    second = client.list(where, limit="2", **{"continue": first.body["metadata"]["continue"]})
    last = client.list(where, limit="2", **{"continue": second.body["metadata"]["continue"]})
    selected = client.list(where, labelSelector="page", limit="2")

    assert names(first) + names(second) + names(last) == [f"p{i}" for i in range(5)]
    assert "continue" not in last.body["metadata"]
    assert names(selected) == ["p0", "p1"]
    assert selected.body["metadata"]["continue"]
    assert [first.body["metadata"]["remainingItemCount"], second.body["metadata"]["remainingItemCount"]] == [
        3,
        1,
    ]
    assert "remainingItemCount" not in selected.body["metadata"]  # a selection is not counted


def watch(
    backend, ns: str, *, selector: str, since: str | None = None, seconds: int = REPLAY_SECONDS
) -> list[dict[str, Any]]:
    """The events of a watch on ConfigMaps (ending after ``seconds``)."""
    core = kubernetes.client.CoreV1Api(backend.api)
    options: dict[str, Any] = {"label_selector": selector, "timeout_seconds": seconds}
    if since is not None:
        options["resource_version"] = since
    stream = kubernetes.watch.Watch().stream(
        core.list_namespaced_config_map, ns, _preload_content=False, **options
    )
    return [{"type": e["type"], "object": e["raw_object"]} for e in stream]


def watching(
    backend, ns: str, *, selector: str, since: str, changes: Callable[[], None]
) -> list[dict[str, Any]]:
    """Make ``changes`` while a watch from ``since`` is open; its events."""
    events: list[dict[str, Any]] = []
    watcher = threading.Thread(
        target=lambda: events.extend(
            watch(backend, ns, selector=selector, since=since, seconds=WATCH_SECONDS)
        )
    )
    watcher.start()
    time.sleep(0.3)  # the watch is open (changes made before would come from history, too)
    changes()
    watcher.join(WATCH_SECONDS + 5)
    return events


def seen(events: list[dict[str, Any]]) -> list[tuple[str, str, str | None]]:
    return [
        (e["type"], e["object"]["metadata"]["name"], (e["object"].get("data") or {}).get("v")) for e in events
    ]


def test_a_watch_sees_every_change_with_its_resource_version(backend, client, ns):
    where = path("v1", "configmaps", ns)
    since = client.list(where, labelSelector="w").body["metadata"]["resourceVersion"]
    versions: list[str] = []

    def changes() -> None:
        versions.append(
            client.create(where, {"metadata": {"name": "x", "labels": {"w": "1"}}, "data": {"v": "1"}}).body[
                "metadata"
            ]["resourceVersion"]
        )
        for value in ("2", "3"):
            versions.append(
                client.merge(f"{where}/x", {"data": {"v": value}}).body["metadata"]["resourceVersion"]
            )
        client.delete(f"{where}/x")

    events = watching(backend, ns, selector="w", since=since, changes=changes)

    assert seen(events) == [
        ("ADDED", "x", "1"),
        ("MODIFIED", "x", "2"),
        ("MODIFIED", "x", "3"),
        ("DELETED", "x", "3"),
    ]
    assert [e["object"]["metadata"]["resourceVersion"] for e in events[:3]] == versions
    assert int(events[3]["object"]["metadata"]["resourceVersion"]) > int(versions[-1])


def test_a_watch_resumed_from_a_list_replays_what_changed_since(backend, client, ns):
    where = path("v1", "configmaps", ns)
    for name in ("kept", "changed", "deleted"):
        client.create(where, {"metadata": {"name": name, "labels": {"r": "1"}}, "data": {"v": "0"}})
    since = client.list(where, labelSelector="r").body["metadata"]["resourceVersion"]
    client.merge(f"{where}/changed", {"data": {"v": "1"}})
    client.delete(f"{where}/deleted")
    client.create(where, {"metadata": {"name": "added", "labels": {"r": "1"}}, "data": {"v": "1"}})

    events = watch(backend, ns, selector="r", since=since)
    fresh = watch(backend, ns, selector="r")

    assert seen(events) == [
        ("MODIFIED", "changed", "1"),
        ("DELETED", "deleted", "0"),
        ("ADDED", "added", "1"),
    ]
    assert sorted(seen(fresh)) == [("ADDED", "added", "1"), ("ADDED", "changed", "1"), ("ADDED", "kept", "0")]


def test_an_object_leaving_and_entering_a_watched_selection_is_deleted_and_added(backend, client, ns):
    where = path("v1", "configmaps", ns)
    since = client.list(where, labelSelector="s=in").body["metadata"]["resourceVersion"]
    versions: list[str] = []

    def changes() -> None:
        client.create(where, {"metadata": {"name": "x", "labels": {"s": "in"}}, "data": {"v": "1"}})
        out = client.merge(f"{where}/x", {"metadata": {"labels": {"s": "out"}}, "data": {"v": "2"}})
        versions.append(out.body["metadata"]["resourceVersion"])
        client.merge(f"{where}/x", {"data": {"v": "3"}})
        client.merge(f"{where}/x", {"metadata": {"labels": {"s": "in"}}, "data": {"v": "4"}})

    events = watching(backend, ns, selector="s=in", since=since, changes=changes)

    # Leaving, it is its last version in the selection, at the resourceVersion of the change.
    assert seen(events) == [("ADDED", "x", "1"), ("DELETED", "x", "1"), ("ADDED", "x", "4")]
    assert events[1]["object"]["metadata"]["labels"] == {"s": "in"}
    assert events[1]["object"]["metadata"]["resourceVersion"] == versions[0]
