"""Upstream's Watcher CR as a document kind."""

from __future__ import annotations

from typing import Any

from fleet.resources.kinds import KYMA_API_VERSION
from kernel.documents import schema
from kernel.documents.registry import ResourceKind, register

from .models import GATEWAY_SCHEMA, RESOURCE_TO_WATCH_SCHEMA, SERVICE_INFO_SCHEMA, Watcher, WatcherField
from .services import watcher_apply


@register
class WatcherKind(ResourceKind):
    api_version = KYMA_API_VERSION
    kind = "Watcher"
    plural = "watchers"
    aliases = ("watcher",)
    default_namespace = "kcp-system"
    model = Watcher
    apply_order = 20
    field_paths = {
        "manager": "spec.manager",
        "labels_to_watch": "spec.labelsToWatch",
        "resource_to_watch": "spec.resourceToWatch",
        "field": "spec.field",
        "service_info": "spec.serviceInfo",
        "gateway": "spec.gateway",
    }

    def extra_columns(self) -> list:
        return [("COMPONENT", lambda w: w.component), ("STATE", lambda w: w.state or "New")]

    def spec_schema(self) -> dict:
        return schema.obj(
            {
                "manager": schema.STRING,
                "labelsToWatch": schema.LABELS,
                "resourceToWatch": RESOURCE_TO_WATCH_SCHEMA,
                "field": schema.enum(*WatcherField.values),
                "serviceInfo": SERVICE_INFO_SCHEMA,
                "gateway": GATEWAY_SCHEMA,
            },
            required=("serviceInfo", "resourceToWatch", "field"),
        )

    def _apply(self, doc: dict[str, Any]) -> tuple[Watcher, bool]:
        namespace, name = self.identity(doc)
        metadata, spec = doc["metadata"], doc.get("spec") or {}
        return watcher_apply(
            namespace=namespace,
            name=name,
            manager=spec.get("manager", ""),
            labels_to_watch=spec.get("labelsToWatch"),
            resource_to_watch=spec["resourceToWatch"],
            field=spec["field"],
            service_info=spec["serviceInfo"],
            gateway=spec.get("gateway"),
            labels=metadata.get("labels"),
            annotations=metadata.get("annotations"),
        )

    def to_document(self, watcher: Watcher) -> dict[str, Any]:
        spec: dict[str, Any] = {}
        if watcher.manager:
            spec["manager"] = watcher.manager
        if watcher.labels_to_watch:
            spec["labelsToWatch"] = watcher.labels_to_watch
        spec["resourceToWatch"] = watcher.resource_to_watch
        spec["field"] = watcher.field
        spec["serviceInfo"] = watcher.service_info
        spec["gateway"] = watcher.gateway_or_default
        status: dict[str, Any] = {"state": watcher.state, "observedGeneration": watcher.observed_generation}
        if watcher.conditions:
            status["conditions"] = watcher.conditions
        return {**self.header(), "metadata": self.metadata(watcher), "spec": spec, "status": status}


@register
class RuntimeWatcherKind(WatcherKind):
    """lifecycle-manager's new name for the Watcher (its ADR 009): same group, versions and schema.

    An alias, not a second resource: a RuntimeWatcher document writes the same Watcher row a
    Watcher document of that name does, and ``get runtimewatchers`` lists the same Watchers.
    """

    kind = "RuntimeWatcher"
    plural = "runtimewatchers"
    aliases = ("runtimewatcher",)
