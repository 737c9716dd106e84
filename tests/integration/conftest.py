import pytest

from tests.support.runtimes import emulator_host, runtimes  # noqa: F401 - fixtures
from tests.support.services import OwnPostgres


@pytest.fixture
def postgres(tmp_path):
    """A PostgreSQL of the test's own, running: the test may stop and start it (an outage)."""
    server = OwnPostgres(tmp_path / "postgres")
    try:
        yield server.init().start()
    finally:
        server.remove()
