"""Fixtures of the deploy/ tests."""

from __future__ import annotations

import pytest

from tests.deploy.manifests import BASE, OVERLAY, build, by_kind_name

BUILDS = {"base": BASE, "overlay": OVERLAY}


@pytest.fixture(scope="module", params=sorted(BUILDS), ids=sorted(BUILDS))
def built(request) -> dict[tuple[str, str], dict]:
    """The objects of the base, then of the example overlay, keyed by (kind, name)."""
    return by_kind_name(build(BUILDS[request.param]))
