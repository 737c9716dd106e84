"""``FleetRoleBinding`` as a document: ``manage.py apply -f``, ``get``, and the API."""

from __future__ import annotations

from typing import Any

from kernel.documents import registry, schema
from kernel.documents.registry import ResourceKind
from kernel.documents.selectors import describe

from .models import NAME_LIST, FleetRoleBinding
from .roles import Role
from .services import binding_apply

API_VERSION = "access.kyma-controlplane.io/v1alpha1"


@registry.register
class FleetRoleBindingKind(ResourceKind):
    """``spec.role`` for ``spec.groups`` (the identity provider's) and ``spec.users`` (user names),
    over the Kymas ``spec.selector`` picks (a label selector; absent: every Kyma)."""

    api_version = API_VERSION
    kind = "FleetRoleBinding"
    plural = "fleetrolebindings"
    aliases = ("fleetrolebinding", "frb", "rolebindings")
    namespaced = False
    model = FleetRoleBinding
    apply_order = 5
    field_paths = {
        "role": "spec.role",
        "groups": "spec.groups",
        "users": "spec.users",
        "selector": "spec.selector",
        "description": "spec.description",
    }

    def spec_schema(self) -> dict:
        return schema.obj(
            {
                "role": schema.enum(*Role.values),
                "groups": NAME_LIST,
                "users": NAME_LIST,
                "selector": schema.LABEL_SELECTOR,
                "description": schema.string(max_length=500),
            },
            required=("role",),
        )

    def extra_columns(self) -> list:
        return [
            ("ROLE", lambda b: b.role),
            ("GROUPS", lambda b: ",".join(b.groups) or "-"),
            ("USERS", lambda b: ",".join(b.users) or "-"),
            ("SCOPE", lambda b: _scope_text(b.selector)),
        ]

    def _apply(self, doc: dict[str, Any]) -> tuple[FleetRoleBinding, bool]:
        spec, metadata = doc.get("spec") or {}, doc["metadata"]
        return binding_apply(
            name=metadata["name"],
            role=spec["role"],
            groups=spec.get("groups") or [],
            users=spec.get("users") or [],
            selector=spec.get("selector") or {},
            description=spec.get("description") or "",
            labels=metadata.get("labels"),
            annotations=metadata.get("annotations"),
        )

    def to_document(self, binding: FleetRoleBinding) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "role": binding.role,
            "groups": list(binding.groups),
            "users": list(binding.users),
        }
        if binding.selector:
            spec["selector"] = binding.selector
        if binding.description:
            spec["description"] = binding.description
        return {**self.header(), "metadata": self.metadata(binding), "spec": spec}


def _scope_text(selector: dict) -> str:
    return describe(selector) or "<every runtime>"
