"""Non-resource endpoints: ``/version``, ``/api``, ``/apis`` and the per-group-version lists.

Shapes follow the legacy (non-aggregated) discovery documents of a real API server, which is what
``kubernetes.dynamic.DynamicClient`` and ``kubectl`` fall back to.
"""

from __future__ import annotations

from typing import Any

from runtime_emulator import errors
from runtime_emulator.catalog import Catalog

KUBERNETES_VERSION = "v1.37.2"  # the release of envtest/build, whose schemas it types objects by


def version_info() -> dict[str, Any]:
    """``/version``: the Kubernetes release the emulator claims to be."""
    major, minor, _ = KUBERNETES_VERSION.lstrip("v").split(".")
    return {
        "major": major,
        "minor": minor,
        "gitVersion": KUBERNETES_VERSION,
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2024-12-10T00:00:00Z",
        "goVersion": "go1.22.9",
        "compiler": "gc",
        "platform": "linux/amd64",
    }


def core_versions(server_address: str) -> dict[str, Any]:
    """``/api``: the core group's versions."""
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    }


def _group(name: str, versions: list[str]) -> dict[str, Any]:
    entries = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"name": name, "versions": entries, "preferredVersion": entries[0]}


def group_list(catalog: Catalog) -> dict[str, Any]:
    """``/apis``: every non-core group with its preferred version first."""
    groups = [_group(name, versions) for name, versions in catalog.group_versions().items()]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def group(catalog: Catalog, name: str) -> dict[str, Any]:
    """``/apis/<group>``."""
    versions = catalog.group_versions().get(name)
    if not versions:
        raise errors.unknown_resource()
    return {"kind": "APIGroup", "apiVersion": "v1", **_group(name, versions)}


def resource_list(catalog: Catalog, group_name: str, version: str) -> dict[str, Any]:
    """``/api/v1`` or ``/apis/<group>/<version>``: the resources served there."""
    types = catalog.in_group_version(group_name, version)
    if not types:
        raise errors.unknown_resource()
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group_name}/{version}" if group_name else version,
        "resources": [entry for rtype in types for entry in rtype.discovery_entries()],
    }


def root_paths(catalog: Catalog) -> dict[str, Any]:
    """``/``: the paths a client may discover."""
    paths = {"/api", "/api/v1", "/apis", "/healthz", "/livez", "/readyz", "/version"}
    for name, versions in catalog.group_versions().items():
        paths.add(f"/apis/{name}")
        paths.update(f"/apis/{name}/{v}" for v in versions)
    return {"paths": sorted(paths)}
