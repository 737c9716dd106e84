from tests.support.runtimes import emulator_host, runtimes  # noqa: F401 - fixtures
