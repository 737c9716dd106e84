"""Objects the contract cases share: a custom resource kind of their own, ``Widget``, served at
``v1`` (stored) and ``v1beta1`` (the same schema, no conversion), with a status subresource."""

from __future__ import annotations

from typing import Any

GROUP = "contract.example.com"
API_VERSION = f"{GROUP}/v1"
_SCHEMA = {
    "openAPIV3Schema": {
        "type": "object",
        "properties": {
            "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        },
    }
}
WIDGETS = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": f"widgets.{GROUP}"},
    "spec": {
        "group": GROUP,
        "scope": "Namespaced",
        "names": {"kind": "Widget", "plural": "widgets", "singular": "widget", "listKind": "WidgetList"},
        "versions": [
            {
                "name": version,
                "served": True,
                "storage": version == "v1",
                "subresources": {"status": {}},
                "schema": _SCHEMA,
            }
            for version in ("v1", "v1beta1")
        ],
    },
}


def widget(name: str, namespace: str, *, api_version: str = API_VERSION, **fields: Any) -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "kind": "Widget",
        "metadata": {"name": name, "namespace": namespace},
        **fields,
    }
