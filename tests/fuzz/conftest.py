"""The fuzz suite: property-based tests of every door (hypothesis, and schemathesis over
``/api/schema/``). ``make test`` runs it in a short mode; ``make fuzz`` sets ``FUZZ_PROFILE=long``.

The invariants, at every door: no 5xx, no traceback, no answer that breaks the documented schema,
nothing stored by a refused request, and the server still answers afterwards. At the end the
suite prints how many cases each door took and how many failed (``fuzz: door=... cases=...``).
"""

from __future__ import annotations

import collections
import os

import pytest
from hypothesis import HealthCheck, settings

# Short: seconds per door, so the whole suite stays well under a minute inside `make test`.
settings.register_profile(
    "short",
    max_examples=int(os.environ.get("FUZZ_EXAMPLES", "8")),
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
    print_blob=True,
)
# Long (`make fuzz`): many more cases, a new random seed each run.
settings.register_profile(
    "long",
    max_examples=int(os.environ.get("FUZZ_EXAMPLES", "300")),
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
    print_blob=True,
)
PROFILE = os.environ.get("FUZZ_PROFILE", "short")
settings.load_profile(PROFILE)

CASES: collections.Counter[str] = collections.Counter()
FAILURES: collections.Counter[str] = collections.Counter()


def count(door: str) -> None:
    """One case sent to ``door``."""
    CASES[door] += 1


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    door = dict(report.user_properties).get("fuzz_door")
    if door and report.failed:
        FAILURES[door] += 1


@pytest.fixture
def door(request: pytest.FixtureRequest):
    """``door("api")``: names the door this test fuzzes (for the tally printed at the end)."""

    def name(value: str) -> None:
        request.node.user_properties.append(("fuzz_door", value))

    return name


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not CASES:
        return
    terminalreporter.write_sep("-", f"fuzz ({PROFILE} profile): cases per door")
    for name in sorted(CASES):
        terminalreporter.write_line(f"fuzz: door={name} cases={CASES[name]} failures={FAILURES[name]}")
