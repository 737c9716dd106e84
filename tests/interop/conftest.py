"""The interop tests: our code against upstream's own, built from Go source (marker ``gobuild``).

Upstream's WatchEvent listener is the pinned Go module, built by ``upstream-listener/build.sh``
(``make interop``) into a cache outside the repository; ``make test`` deselects these tests only
where it cannot be built (no Go). Each test starts its own processes on its own ports.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.interop.upstream import RuntimeWatcher, UpstreamListener, upstream_listener_binary
from tests.support.processes import free_port
from tests.watchers.runtime.support import Pki, make_pki

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(pytest.mark.gobuild)


@pytest.fixture(scope="session")
def upstream_binary() -> Path:
    return upstream_listener_binary()


@pytest.fixture(scope="session")
def pki() -> Pki:
    return make_pki()


@pytest.fixture
def start_upstream(
    upstream_binary: Path, pki: Pki, tmp_path: Path
) -> Iterator[Callable[..., UpstreamListener]]:
    """Start upstream's listener (on a given port, e.g. one a watcher already sends to)."""
    started: list[UpstreamListener] = []

    def start(port: int | None = None) -> UpstreamListener:
        listener = UpstreamListener(
            upstream_binary, tmp_path / f"upstream-{len(started)}", pki, port or free_port()
        )
        started.append(listener)
        return listener.start()

    yield start
    for listener in started:
        listener.stop()


@pytest.fixture
def start_watcher(pki: Pki, tmp_path: Path) -> Iterator[Callable[..., RuntimeWatcher]]:
    """Start our runtime watcher process sending to ``kcp_addr`` (extra env as keywords)."""
    started: list[RuntimeWatcher] = []

    def start(kcp_addr: str, **settings: str) -> RuntimeWatcher:
        watcher = RuntimeWatcher(tmp_path / f"watcher-{len(started)}", pki, kcp_addr, settings)
        started.append(watcher)
        return watcher.start()

    yield start
    for watcher in started:
        watcher.stop()
