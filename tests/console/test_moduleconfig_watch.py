"""Watching ModuleConfigs through a real gunicorn web process: changes arrive as they are committed,
a resumed watch loses and repeats nothing, and open watches are bounded per credential."""

from __future__ import annotations

import datetime as dt
import http.client
import json
import queue
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection

from console.api import watch as watch_module
from fleet.models import Kyma, ModuleConfig, ModuleConfigDeletion
from fleet.services import modules as module_services
from fleet.services import revisions
from kernel.api_tokens import api_token_create
from tests.factories import KymaFactory, ModuleFactory
from tests.support.processes import start_web

pytestmark = pytest.mark.django_db(transaction=True)
PER_CREDENTIAL = 2


class Watch:
    """One open watch: its lines are read by a thread into a queue."""

    def __init__(self, url: str, key: str, query: str) -> None:
        host, _, port = url.removeprefix("http://").partition(":")
        self.conn = http.client.HTTPConnection(host, int(port), timeout=30)
        self.conn.request(
            "GET", f"/api/v1/moduleconfigs/?watch=true&{query}", headers={"Authorization": f"Token {key}"}
        )
        self.response = self.conn.getresponse()
        self.lines: queue.Queue[dict[str, Any]] = queue.Queue()
        if self.response.status == 200:
            threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        try:
            for raw in self.response:
                self.lines.put(json.loads(raw))
        except (OSError, ValueError, AttributeError, http.client.HTTPException):  # closed by the test
            pass

    def next(self, timeout: float = 10) -> dict[str, Any]:
        return self.lines.get(timeout=timeout)

    def next_change(self, timeout: float = 10) -> dict[str, Any]:
        """The next event that is not a bookmark."""
        while True:
            event = self.next(timeout)
            if event["type"] != "BOOKMARK":
                return event

    def until_bookmark(self, timeout: float = 10) -> tuple[list[dict[str, Any]], int]:
        """Events up to the next bookmark, and the bookmark's revision."""
        events = []
        while True:
            event = self.next(timeout)
            if event["type"] == "BOOKMARK":
                return events, int(event["object"]["metadata"]["resourceVersion"])
            events.append(event)

    def close(self) -> None:
        self.conn.close()


@pytest.fixture
def web() -> Iterator[str]:
    proc, url = start_web(
        MODULECONFIG_WATCH_PER_CREDENTIAL=str(PER_CREDENTIAL),
        MODULECONFIG_WATCH_BOOKMARK_INTERVAL="0.5",
        MODULECONFIG_WATCH_SLOT_TTL="5",
    )
    try:
        yield url
    finally:
        proc.stop()


@pytest.fixture
def key() -> str:
    user = User.objects.create_superuser("manager", password="x")
    return api_token_create(user=user, name="keda-manager")[1]


def config_change(kyma: Kyma, module: Any, replicas: int) -> ModuleConfig:
    config, _ = module_services.moduleconfig_upsert(
        kyma=kyma,
        module=module,
        spec={"replicas": replicas},
        source_generation=replicas,
        source_resource_version="",
    )
    return config


def revision_of(event: dict[str, Any]) -> int:
    return int(event["object"]["metadata"]["resourceVersion"])


def test_a_watch_sees_changes_as_they_happen_and_resumes_without_loss_or_repeat(web, key):
    keda, other = ModuleFactory(name="keda"), ModuleFactory(name="serverless")
    kymas = [KymaFactory(name=f"k{n}") for n in range(3)]
    first = config_change(kymas[0], keda, 1)

    # Given a watch from the beginning: the catch-up says ADDED, then marks its end.
    watch = Watch(web, key, "module=keda&since_revision=0")
    assert watch.response.status == 200
    events, revision = watch.until_bookmark()
    assert [(e["type"], e["object"]["spec"]["kyma"]) for e in events] == [("ADDED", "k0")]
    assert revision == first.revision

    # When configs change, the watch receives each one, other modules' changes not at all.
    config_change(kymas[1], keda, 2)
    config_change(kymas[0], other, 9)
    config_change(kymas[0], keda, 3)
    got = [watch.next_change() for _ in range(2)]
    assert [(e["type"], e["object"]["spec"]["kyma"], e["object"]["spec"]["resource"]) for e in got] == [
        ("ADDED", "k1", {"replicas": 2}),
        ("MODIFIED", "k0", {"replicas": 3}),
    ]
    last = revision_of(got[-1])

    # And after a disconnect, changes made meanwhile (a change, a new config, a deletion) arrive
    # once each when the watch resumes from the last revision it received.
    watch.close()
    config_change(kymas[2], keda, 4)
    config_change(kymas[1], keda, 5)
    ModuleConfig.objects.filter(kyma=kymas[0], module=keda).delete()
    resumed = Watch(web, key, f"module=keda&since_revision={last}")
    events, _ = resumed.until_bookmark()
    assert [(e["type"], e["object"]["spec"]["kyma"]) for e in events] == [
        ("ADDED", "k2"),
        ("MODIFIED", "k1"),
        ("DELETED", "k0"),
    ]
    revisions = [revision_of(e) for e in events]
    assert revisions == sorted(set(revisions)) and revisions[0] > last

    # Periodic bookmarks carry the revision the watcher has everything up to.
    _, marked = resumed.until_bookmark(timeout=5)
    assert marked >= revisions[-1]
    resumed.close()


def test_open_watches_are_bounded_per_credential(web, key):
    ModuleFactory(name="keda")
    open_ = [Watch(web, key, "module=keda") for _ in range(PER_CREDENTIAL)]
    for watch in open_:
        assert watch.response.status == 200
        watch.until_bookmark()

    refused = Watch(web, key, "module=keda")
    assert refused.response.status == 429
    assert "open watches" in json.loads(refused.response.read())["detail"]

    other_user = User.objects.create_superuser("other", password="x")
    other = Watch(web, api_token_create(user=other_user, name="t")[1], "module=keda")
    assert other.response.status == 200

    # A closed watch frees its slot (once the server noticed the client went: next bookmark).
    open_[0].close()
    deadline_watch = None
    for _ in range(50):
        deadline_watch = Watch(web, key, "module=keda")
        if deadline_watch.response.status == 200:
            break
        deadline_watch.response.read()
        threading.Event().wait(0.1)
    assert deadline_watch is not None and deadline_watch.response.status == 200


def test_bad_watch_parameters_are_precise_400s(web, key):
    ModuleFactory(name="keda")
    for query, field in [
        ("module=keda&since_revision=abc", "since_revision"),
        ("module=nope", "module"),
        ("module=keda&kyma=k1", "kyma"),
    ]:
        watch = Watch(web, key, query)
        assert watch.response.status == 400, query
        assert json.loads(watch.response.read())["errors"][0]["field"] == field


def test_a_revision_this_control_plane_never_gave_is_410_so_the_manager_starts_over(web, key):
    ModuleFactory(name="keda")
    watch = Watch(web, key, "module=keda&since_revision=999999")
    assert watch.response.status == 410
    assert "start again from 0" in json.loads(watch.response.read())["detail"]


def test_a_watch_from_before_pruned_deletions_is_410(web, key):
    keda = ModuleFactory(name="keda")
    config = config_change(KymaFactory(name="gone"), keda, 1)
    since = config.revision
    config.delete()
    deleted = ModuleConfigDeletion.objects.get(uid=config.uid)
    assert (
        revisions.moduleconfig_deletions_prune(older_than=deleted.deleted_at + dt.timedelta(seconds=1)) == 1
    )
    watch = Watch(web, key, f"module=keda&since_revision={since}")
    assert watch.response.status == 410
    assert "too old" in json.loads(watch.response.read())["detail"]
    assert Watch(web, key, f"module=keda&since_revision={deleted.revision}").response.status == 200


def test_watches_never_take_the_threads_of_other_requests(key):
    # Given a web process with one thread for requests and two for watches.
    proc, url = start_web(WEB_THREADS="1", WEB_WATCH_THREADS="2")  # one process (start_web)
    try:
        ModuleFactory(name="keda")
        open_ = [Watch(url, key, "module=keda") for _ in range(2)]
        for watch in open_:
            assert watch.response.status == 200
            watch.until_bookmark()
        # When a third watch comes, it is refused (its manager retries) rather than queued...
        third = Watch(url, key, "module=keda")
        assert third.response.status == 503
        assert "WEB_WATCH_THREADS" in json.loads(third.response.read())["detail"]
        # ...and the API still answers while both watches stream.
        host, _, port = url.removeprefix("http://").partition(":")
        for _ in range(3):
            conn = http.client.HTTPConnection(host, int(port), timeout=10)
            conn.request("GET", "/api/v1/moduleconfigs/", headers={"Authorization": f"Token {key}"})
            assert conn.getresponse().status == 200
            conn.close()
    finally:
        proc.stop()


def database_connections() -> int | None:
    """Connections to this test database now (PostgreSQL); ``None`` where nothing counts them."""
    if connection.vendor != "postgresql":
        return None
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()")
        return cursor.fetchone()[0]


def test_a_burst_of_watches_opens_on_a_bounded_number_of_database_connections(key):
    # Given a web process with room for 40 watches, one of them open (the hub is listening).
    burst = 40
    proc, url = start_web(
        WEB_WATCH_THREADS=str(burst + 1),
        MODULECONFIG_WATCH_PER_CREDENTIAL=str(burst + 1),
        MODULECONFIG_WATCH_BOOKMARK_INTERVAL="0.5",  # a watch's reader lets go of it at a line
    )
    try:
        ModuleFactory(name="keda")
        first = Watch(url, key, "module=keda")
        assert first.response.status == 200
        first.until_bookmark()
        before = database_connections()
        # When 40 managers open their watches at the same moment...
        peak, stop = [before or 0], threading.Event()

        def sample() -> None:
            try:
                while not stop.is_set():
                    peak.append(database_connections() or 0)
            finally:
                connection.close()

        sampler = threading.Thread(target=sample)
        sampler.start()
        start, opened = threading.Barrier(burst), []

        def open_one() -> None:
            start.wait()
            watch = Watch(url, key, "module=keda")
            if watch.response.status == 200:
                watch.until_bookmark(timeout=60)
            opened.append(watch)

        openers = [threading.Thread(target=open_one) for _ in range(burst)]
        for thread in openers:
            thread.start()
        for thread in openers:
            thread.join()
        stop.set()
        sampler.join()
        # ...every one of them opens and streams (none refused for a lack of connections)...
        assert sorted(w.response.status for w in opened) == [200] * burst
        # ...and the process used a few connections for them, not one each: those it opens watches
        # with at once, the sampler's own, and backends of connections just closed, which stay in
        # pg_stat_activity a moment on a busy machine (up to 6 more were seen in CI; one per
        # watch, as before the opening turns, was 26 more).
        if before is not None:
            assert max(peak) - before <= 3 * watch_module.OPENING_AT_ONCE, (before, max(peak))
        for watch in [first, *opened]:
            watch.close()
    finally:
        proc.stop()
