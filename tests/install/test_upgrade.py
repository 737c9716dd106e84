"""An upgrade as an operator runs it (docs/operators/upgrades.md): the previous release
(deploy/previous-release.yaml: a commit of main, its deploy/ and its images) installed with data,
then the working tree's migration Job and roles applied while its runtimes keep sending events.

The migrations run while the old pods serve (expand, then contract in a later release: the old
code keeps working on the new schema until it is gone); no event is lost and the gateway answers
no 5xx while Deployment after Deployment rolls to the new images. The test is the same whatever
the migrations are: it installs whatever the named commit shipped and upgrades to whatever this
tree ships.
"""

from __future__ import annotations

import tempfile
import threading
import time
from pathlib import Path

import pytest
import yaml

from envtest.install import (
    ROLES,
    Installation,
    Release,
    events_outcome,
    gateway_stats,
    release_tree,
    runtime_edit,
    wait_for,
)
from tests.install.conftest import ROOT, redis_database
from tests.install.test_installed import Edits, kymas

PREVIOUS = yaml.safe_load((ROOT / "deploy" / "previous-release.yaml").read_text())["commit"]


@pytest.fixture(scope="module")
def previous_installed():
    """The previous release, installed and serving three runtimes."""
    workdir = Path(tempfile.mkdtemp(prefix="upgrade-"))
    release = Release(release_tree(PREVIOUS), "previous")
    # Its own Redis database: the session's installation may still hold the other one.
    with Installation(
        workdir, release, redis_db=(redis_database() + 1) % 16, old_release=True
    ) as installation:
        web = installation.session()
        installation.register_runtimes(web)

        def ready() -> bool:
            found = kymas(web)
            return len(found) == 3 and all(
                (k.get("status") or {}).get("state") == "Ready" for k in found.values()
            )

        wait_for(ready, timeout=600, what="the previous release's Kymas Ready")
        yield installation, web


def test_an_upgrade_from_the_previous_release_loses_no_event_and_answers_no_5xx(previous_installed):
    installed, web = previous_installed
    new = Release(ROOT, "0.1.0-upgrade")
    new.build(installed.workdir)
    installed.add_release(new)
    site = installed.site_overlay(new)
    gateway_before = gateway_stats(installed)
    edits = Edits(installed)
    thread = threading.Thread(target=edits.run, daemon=True)
    since = time.time()
    thread.start()
    old_pods_ready_during_migration = []
    try:
        time.sleep(5)
        migrating = threading.Thread(target=installed.migrate, args=(site,), daemon=True)
        migrating.start()
        while migrating.is_alive():
            old_pods_ready_during_migration.append(all(installed.ready_replicas(role) >= 1 for role in ROLES))
            migrating.join(1)
        assert installed.get("job", "controlplane-migrate")["status"].get("succeeded") == 1
        installed.roll_out(site)
        time.sleep(5)
    finally:
        edits.stop.set()
        thread.join(10)
    assert old_pods_ready_during_migration and all(old_pods_ready_during_migration)
    for role in ROLES:
        images = {c["image"] for p in installed.pods(role) for c in p["spec"]["containers"]}
        assert images == {f"registry.example.com/kyma-fleet/controlplane:{new.tag}"}, role
    outcome = events_outcome(installed, edits.made, since, gateway_before)
    print(f"upgrade from {PREVIOUS[:7]}: {outcome.line()}")
    assert edits.errors == []
    assert (outcome.lost, outcome.server_errors) == (0, 0)
    # The new release's first administrator step ran on the old data: the admin of the Secret
    # (the previous release had no such step) can log in.
    installed.session()
    # Every runtime still reconciles: an edit made now is followed.
    runtime = installed.installed_runtimes[0]
    channel = {"fast": "regular", "regular": "fast"}[kymas(web)[runtime.kyma]["spec"]["channel"]]
    runtime_edit(runtime, channel)
    wait_for(
        lambda: kymas(web)[runtime.kyma]["spec"]["channel"] == channel, timeout=120, what="an edit after"
    )
