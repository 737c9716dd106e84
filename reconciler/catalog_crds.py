"""The ModuleTemplate and ModuleReleaseMeta CustomResourceDefinitions the control plane installs in
each runtime, so that the catalog mirrored there (:mod:`.catalog`) has upstream's shapes.

Written, like the Kyma's (:mod:`.kyma_crd`), from JSON Schemas of our own, translated to a CRD's
structural schema: the fields and types of upstream's ``operator.kyma-project.io/v1beta2``
ModuleTemplate and ModuleReleaseMeta (lifecycle-manager's api/v1beta2 types), so upstream's tools
and kubectl habits (``kubectl get moduletemplates,modulereleasemetas -n kyma-system``, short names
``mt`` and ``mrm``) work. Where upstream's rules are narrower than ours (a module name of letters
only), ours are taken, or our own catalog could not be mirrored; a ModuleReleaseMeta names either
channels or a mandatory version (upstream's CEL rule, kept as such).
"""

from __future__ import annotations

from typing import Any

from fleet.models.module import VERSION_SCHEMA
from kernel.documents import schema

from .kyma_crd import GROUP, MANAGED_BY_LABEL, structural

VERSION = "v1beta2"
MODULE_NAME = schema.string(pattern=schema.DNS_LABEL, max_length=64)
_OPEN_OBJECT = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
_NAMED_LINK = schema.obj({"name": schema.STRING, "link": schema.string()}, required=("name", "link"))

MODULE_TEMPLATE_SPEC = schema.obj(
    {
        "channel": schema.string(pattern=r"^$|^[a-z]{3,}$", max_length=32),  # deprecated upstream
        "version": VERSION_SCHEMA,
        "moduleName": MODULE_NAME,
        "mandatory": schema.BOOLEAN,
        "requiresDowntime": schema.BOOLEAN,
        "customStateCheck": {
            "type": "array",
            "items": schema.obj(
                {
                    "jsonPath": schema.STRING,
                    "value": schema.STRING,
                    "mappedState": schema.enum(
                        "Processing", "Deleting", "Ready", "Error", "", "Warning", "Unmanaged"
                    ),
                },
                required=("jsonPath", "value", "mappedState"),
            ),
        },
        "resources": {"type": "array", "items": _NAMED_LINK},
        "info": schema.obj(
            {
                "repository": schema.STRING,
                "documentation": schema.STRING,
                "icons": {"type": "array", "items": _NAMED_LINK},
            },
            required=("repository", "documentation"),
        ),
        "associatedResources": {
            "type": "array",
            "items": schema.obj(
                {"group": schema.STRING, "version": schema.STRING, "kind": schema.STRING},
                required=("group", "version", "kind"),
            ),
        },
        "manager": schema.obj(
            {
                "group": schema.STRING,
                "version": schema.STRING,
                "kind": schema.STRING,
                "namespace": schema.STRING,
                "name": schema.STRING,
            },
            required=("group", "version", "kind", "name"),
        ),
    },
    required=(),
)
MODULE_RELEASE_META_SPEC = schema.obj(
    {
        "moduleName": MODULE_NAME,
        "ocmComponentName": schema.string(max_length=255),
        "channels": {
            "type": "array",
            "items": schema.obj(
                {
                    "channel": schema.string(pattern=schema.CHANNEL, min_length=3, max_length=32),
                    "version": VERSION_SCHEMA,
                },
                required=("channel", "version"),
            ),
        },
        "mandatory": schema.obj({"version": schema.string(min_length=1)}, required=("version",)),
        "beta": schema.BOOLEAN,
        "internal": schema.BOOLEAN,
        "kymaSelector": schema.obj(
            {
                "matchLabels": {"type": "object", "additionalProperties": schema.STRING},
                "matchExpressions": {
                    "type": "array",
                    "items": schema.obj(
                        {
                            "key": schema.STRING,
                            "operator": schema.STRING,
                            "values": {"type": "array", "items": schema.STRING},
                        },
                        required=("key", "operator"),
                    ),
                },
            }
        ),
    },
    required=("moduleName",),
)


def _template_spec() -> dict[str, Any]:
    spec = structural(MODULE_TEMPLATE_SPEC)
    # The default CR (an embedded object) and the OCM descriptor keep whatever they hold.
    spec["properties"]["data"] = {**_OPEN_OBJECT, "x-kubernetes-embedded-resource": True}
    spec["properties"]["descriptor"] = dict(_OPEN_OBJECT)
    for name in ("resources",):
        spec["properties"][name].update(
            {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]}
        )
    spec["properties"]["info"]["properties"]["icons"].update(
        {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]}
    )
    spec["required"] = ["descriptor"]
    return spec


def _release_meta_spec() -> dict[str, Any]:
    spec = structural(MODULE_RELEASE_META_SPEC)
    spec["properties"]["channels"].update(
        {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["channel"]}
    )
    spec["x-kubernetes-validations"] = [
        {
            "rule": "has(self.mandatory) != has(self.channels)",
            "message": "a ModuleReleaseMeta names either channels or a mandatory version",
        }
    ]
    return spec


def _crd(kind: str, plural: str, short: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}", "labels": {MANAGED_BY_LABEL: "kyma"}},
        "spec": {
            "group": GROUP,
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
                "shortNames": [short],
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "additionalPrinterColumns": [
                        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
                    ],
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "apiVersion": schema.STRING,
                                "kind": schema.STRING,
                                "metadata": {"type": "object"},
                                "spec": spec,
                            },
                        }
                    },
                }
            ],
        },
    }


def module_template_crd() -> dict[str, Any]:
    return _crd("ModuleTemplate", "moduletemplates", "mt", _template_spec())


def module_release_meta_crd() -> dict[str, Any]:
    return _crd("ModuleReleaseMeta", "modulereleasemetas", "mrm", _release_meta_spec())
