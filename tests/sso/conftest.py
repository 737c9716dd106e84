"""The sso tier (marker ``sso``): single sign-on against a real OpenID provider, ORY Hydra built
from its pinned module (``make sso``), with the tests' own login and consent app.

Each test module gets a provider (state in memory) and a real web role (gunicorn) configured for
it, on their own ports; the web role shares the test database, so tests that use them are
transactional. ``make test`` leaves the tier out only where the provider cannot be built (no Go or
no C compiler) and says so; with ``REQUIRE_ALL_TIERS=1`` (CI) that is a failure.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.sso.provider import Hydra, hydra_binary
from tests.support.processes import Process, free_port, process_env, wait_port

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(pytest.mark.sso)


@pytest.fixture(scope="module")
def provider(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hydra]:
    hydra = Hydra(hydra_binary(), tmp_path_factory.mktemp("hydra")).start()
    yield hydra
    hydra.stop()


@dataclass
class Web:
    url: str
    proc: Process
    client_id: str


def start_sso_web(provider: Hydra, **env: str) -> Web:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    client_id, secret = provider.client(f"{url}/oidc/callback/")
    settings = {
        "OIDC_ISSUER": provider.issuer,
        "OIDC_CLIENT_ID": client_id,
        "OIDC_CLIENT_SECRET": secret,
        "WEB_WORKERS": "1",
        **env,
    }
    proc = Process(
        "web",
        [sys.executable, "manage.py", "serve", "web", "--bind", f"127.0.0.1:{port}"],
        process_env(**settings),
    )
    try:
        wait_port(port, proc=proc)
    except BaseException:
        proc.stop()
        raise
    return Web(url, proc, client_id)


@pytest.fixture(scope="module")
def web(provider: Hydra, django_db_setup, django_db_blocker) -> Iterator[Web]:
    started = start_sso_web(provider)
    yield started
    started.proc.stop()
