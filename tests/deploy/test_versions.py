"""The minimum PostgreSQL the operators' page names is the one Django refuses to go below (it
checks at the first connection); the install tier runs on the machine's server, and the minimum
Redis has a test of its own (tests/integration/test_redis_minimum.py)."""

from __future__ import annotations

from django.db.backends.postgresql.features import DatabaseFeatures

from tests.deploy.manifests import ROOT

PAGE = ROOT / "docs" / "operators" / "database.md"


def test_the_minimum_postgresql_is_djangos_floor():
    (major,) = DatabaseFeatures.minimum_database_version
    assert f"| PostgreSQL | {major} |" in PAGE.read_text()
    assert f"PostgreSQL {major} or later" in (ROOT / "deploy" / "controlplane" / "README.md").read_text()
