"""The example overlays' database connections, added up from the built manifests: what every
Deployment (with its rolling update's extra pod) and the migration Job may open stays below what
PostgreSQL's default max_connections leaves for them, and docs/operators/database.md says so."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest

from tests.deploy.manifests import OVERLAY, OVERLAY_DIRECT, ROOT, build, by_kind_name, config_data, pod_spec

PAGE = ROOT / "docs" / "operators" / "database.md"
MAX_CONNECTIONS = 100  # PostgreSQL's default
SUPERUSER_RESERVED = 3  # its superuser_reserved_connections default
ROLES = {
    "web": ("Deployment", "controlplane-web"),
    "listener": ("Deployment", "controlplane-listener"),
    "worker": ("Deployment", "controlplane-worker"),
    "beat": ("Deployment", "controlplane-beat"),
    "migration Job": ("Job", "controlplane-migrate"),
}
GUNICORN_WORKERS = {"web": "WEB_WORKERS", "listener": "LISTENER_WORKERS"}


@dataclass(frozen=True)
class Row:
    pods: int
    processes: int
    per_process: int
    surge: int

    @property
    def connections(self) -> int:
        return self.pods * self.processes * self.per_process

    @property
    def during_update(self) -> int:
        return (self.pods + self.surge) * self.processes * self.per_process


def _env(container: dict) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container.get("env") or () if "value" in e}


def budget(objects: dict) -> dict[str, Row]:
    config = config_data(objects)
    rows = {}
    for role, key in ROLES.items():
        workload = objects[key]
        spec = pod_spec(workload)
        steps = [  # the containers that reach the database (not the web pods' static-files link)
            c
            for c in (*(spec.get("initContainers") or ()), *spec["containers"])
            if any(e["name"] == "DATABASE_URL" for e in c.get("env") or ())
        ]
        pools = {int(_env(c)["DATABASE_POOL_MAX_SIZE"]) for c in steps}
        assert len(pools) == 1, f"{role}: every step sizes its pool alike"
        per_process = pools.pop() + (1 if role == "web" else 0)  # the watches' LISTEN
        if role == "worker":
            concurrency = int(_env(spec["containers"][0])["WORKER_CONCURRENCY"])
            assert per_process >= concurrency + 1, "a running reconcile holds a connection, the probes one"
        processes = int(config[GUNICORN_WORKERS[role]]) if role in GUNICORN_WORKERS else 1
        if key[0] == "Job":
            rows[role] = Row(1, 1, per_process, 0)
        else:
            strategy = workload["spec"]["strategy"]["rollingUpdate"]
            rows[role] = Row(workload["spec"]["replicas"], processes, per_process, int(strategy["maxSurge"]))
    return rows


def documented() -> dict[str, tuple[int, int, int, int, int]]:
    """The table of the page: role -> (pods, processes, per process, connections, during update)."""
    text = PAGE.read_text()
    table = text[text.index("<!-- connection budget") :].split("\n\n")[0]
    rows = {}
    for line in table.splitlines()[3:]:
        cells = [c.strip().strip("*") for c in line.strip("|").split("|")]
        numbers = [int(m.group()) if (m := re.match(r"\d+", c)) else 0 for c in cells[1:]]
        rows[cells[0]] = tuple(numbers)
    return rows


@pytest.mark.parametrize("overlay", [OVERLAY, OVERLAY_DIRECT], ids=["example", "example-direct"])
def test_the_overlay_opens_fewer_connections_than_postgresql_allows_even_while_it_rolls(overlay):
    rows = budget(by_kind_name(build(overlay)))
    peak = sum(row.during_update for row in rows.values())
    assert peak < MAX_CONNECTIONS - SUPERUSER_RESERVED


@pytest.mark.parametrize("overlay", [OVERLAY, OVERLAY_DIRECT], ids=["example", "example-direct"])
def test_the_sizing_table_is_the_overlays_own(overlay):
    rows = budget(by_kind_name(build(overlay)))
    table = documented()
    for role, row in rows.items():
        assert table[role] == (row.pods, row.processes, row.per_process, row.connections, row.during_update)
    total = table["total"]
    assert total[3:] == (
        sum(row.connections for row in rows.values()),
        sum(row.during_update for row in rows.values()),
    )
