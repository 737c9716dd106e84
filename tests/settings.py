"""Settings for the test suite: the project's settings with an isolated state directory.

Each pytest-xdist worker gets its own state directory (SQLite file, filesystem broker) and,
when the broker is Redis, its own Redis database, so parallel workers never see each other's
tasks (a suite given database N > 0 uses N, N + 1, ...; given 0, it uses 10, 11, ...).
Processes the tests start (gunicorn, Celery) use these settings too.
"""

import os
import re
from pathlib import Path

_worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
_number = int(re.sub(r"\D", "", _worker) or 0)
# pytest's controller process imports these settings too, and xdist workers (and the processes
# tests start) inherit its environment: derive every per-worker value from the values the user
# gave, remembered on the first import, never from what an earlier import wrote.
_base_state = os.environ.setdefault(
    "CONTROLPLANE_TEST_STATE_BASE",
    os.environ.get("CONTROLPLANE_STATE_DIR", str(Path(__file__).resolve().parent.parent / ".state")),
)
os.environ["CONTROLPLANE_STATE_DIR"] = str(Path(_base_state) / f"test-{_worker}")
os.environ.setdefault("DJANGO_DEBUG", "1")
_broker = os.environ.setdefault("CONTROLPLANE_TEST_BROKER_BASE", os.environ.get("CELERY_BROKER_URL", ""))
if _broker.startswith("redis://"):
    # Database 0 (or none) given: workers use 10, 11, ... (away from a developer's database 0).
    # Another database N given: N, N + 1, ..., so two suites on one Redis (given 0 and 4, say)
    # never take each other's tasks.
    _given = re.search(r"/(\d+)$", _broker.rstrip("/"))
    _first = int(_given.group(1)) if _given and int(_given.group(1)) else 10
    _derived = re.sub(r"(/\d+)?$", f"/{_first + _number}", _broker.rstrip("/"), count=1)
    # A process a test started with a broker of its own (a Redis it stops and starts) keeps it:
    # only a URL this module derived (in this process or the one it inherited from) is replaced.
    if os.environ.get("CELERY_BROKER_URL", "") in (
        "",
        _broker,
        os.environ.get("CONTROLPLANE_TEST_BROKER_DERIVED"),
    ):
        os.environ["CELERY_BROKER_URL"] = os.environ["CONTROLPLANE_TEST_BROKER_DERIVED"] = _derived

from controlplane.settings import *

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
LOGGING["root"]["level"] = "WARNING"
