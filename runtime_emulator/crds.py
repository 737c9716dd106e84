"""Building CustomResourceDefinition manifests for tests and seeding."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def crd_manifest(
    group: str,
    kind: str,
    *,
    plural: str | None = None,
    versions: Iterable[str] = ("v1",),
    namespaced: bool = True,
    status_subresource: bool = True,
    short_names: Iterable[str] = (),
) -> dict[str, Any]:
    """A minimal apiextensions.k8s.io/v1 CRD (schema preserving unknown fields); first version stored."""
    plural = plural or f"{kind.lower()}s"
    served = []
    for index, version in enumerate(versions):
        entry: dict[str, Any] = {
            "name": version,
            "served": True,
            "storage": index == 0,
            "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
        }
        if status_subresource:
            entry["subresources"] = {"status": {}}
        served.append(entry)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
                "shortNames": list(short_names),
            },
            "scope": "Namespaced" if namespaced else "Cluster",
            "versions": served,
        },
    }
