"""The document kinds of the core domain: Kyma (upstream shape), Module, ModuleConfig,
SyncResource, and the upstream kubeconfig Secret."""

from __future__ import annotations

import base64
import binascii
from typing import Any

from django.db.models import QuerySet

from fleet.models import Kyma, Module, ModuleConfig, SyncResource
from fleet.models.kyma import CHANNEL_SCHEMA, DEFAULT_NAMESPACE, MODULES_SCHEMA
from fleet.models.manifest_policy import KINDS_SCHEMA, NAMESPACES_SCHEMA
from fleet.models.module import CHANNELS_SCHEMA, DEFAULT_CR_SCHEMA, MANDATORY_LABEL, VERSIONS_SCHEMA
from fleet.models.rollout import POLICY_SCHEMA
from fleet.models.syncresource import ApplyStrategy, DeletionPolicy
from fleet.services import kymas as kyma_services
from fleet.services import modules as module_services
from kernel.documents import schema
from kernel.documents.registry import ResourceKind, register
from kernel.errors import NotFound, ValidationFailed

KYMA_API_VERSION = "operator.kyma-project.io/v1beta2"
FLEET_API_VERSION = "controlplane.kyma-project.io/v1alpha1"
RUNTIME_ID_LABEL = "kyma-project.io/runtime-id"
SKR_DOMAIN_ANNOTATION = "skr-domain"
KYMA_NAME_LABEL = "operator.kyma-project.io/kyma-name"
MODULE_NAME_LABEL = "operator.kyma-project.io/module-name"


@register
class KymaKind(ResourceKind):
    """Upstream's Kyma CR. The runtime id is the ``kyma-project.io/runtime-id`` label (default:
    the name) and the SKR domain the ``skr-domain`` annotation, as in lifecycle-manager."""

    api_version = KYMA_API_VERSION
    kind = "Kyma"
    plural = "kymas"
    aliases = ("kyma",)
    default_namespace = DEFAULT_NAMESPACE
    model = Kyma
    apply_order = 30
    field_paths = {
        "runtime_id": f"metadata.labels.{RUNTIME_ID_LABEL}",
        "skr_domain": f"metadata.annotations.{SKR_DOMAIN_ANNOTATION}",
        "channel": "spec.channel",
        "modules": "spec.modules",
        "skip_maintenance_windows": "spec.skipMaintenanceWindows",
    }

    def extra_columns(self) -> list:
        return [
            ("STATE", lambda k: k.state or "New"),
            ("CHANNEL", lambda k: k.channel),
            ("RUNTIME-ID", lambda k: k.runtime_id),
        ]

    def spec_schema(self) -> dict:
        return schema.obj(
            {"channel": CHANNEL_SCHEMA, "modules": MODULES_SCHEMA, "skipMaintenanceWindows": schema.BOOLEAN}
        )

    def warnings(self, doc: dict[str, Any]) -> list[str]:
        """A channel no module offers, or a module the catalog lacks, is accepted (the catalog
        may come later) but almost always a typo: say so."""
        spec = doc.get("spec") or {}
        catalog = {module.name: module.channels for module in Module.objects.only("name", "channels")}
        offered = {channel for channels in catalog.values() for channel in channels}
        found = []
        channel = spec.get("channel")
        if channel and channel not in offered:
            found.append(
                f"no module offers channel {channel!r} (offered: {', '.join(sorted(offered)) or 'none'})"
            )
        for entry in spec.get("modules") or []:
            name = entry.get("name")
            if name not in catalog:
                found.append(
                    f"module {name!r} is not in the catalog (known: {', '.join(sorted(catalog)) or 'none'})"
                )
            elif entry.get("channel") and entry["channel"] not in catalog[name]:
                found.append(f"module {name!r} has no channel {entry['channel']!r}")
        return found

    def _apply(self, doc: dict[str, Any]) -> tuple[Kyma, bool]:
        namespace, name = self.identity(doc)
        metadata, spec = doc["metadata"], doc.get("spec") or {}
        labels = dict(metadata.get("labels") or {})
        annotations = dict(metadata.get("annotations") or {})
        return kyma_services.kyma_apply(
            namespace=namespace,
            name=name,
            runtime_id=labels.pop(RUNTIME_ID_LABEL, "") or name,
            skr_domain=annotations.pop(SKR_DOMAIN_ANNOTATION, ""),
            channel=spec.get("channel", "regular"),
            modules=spec.get("modules", []),
            skip_maintenance_windows=spec.get("skipMaintenanceWindows", False),
            labels=labels,
            annotations=annotations,
        )

    def to_document(self, kyma: Kyma) -> dict[str, Any]:
        annotations = {SKR_DOMAIN_ANNOTATION: kyma.skr_domain} if kyma.skr_domain else {}
        spec: dict[str, Any] = {"channel": kyma.channel, "modules": kyma.module_entries()}
        if kyma.skip_maintenance_windows:
            spec["skipMaintenanceWindows"] = True
        status: dict[str, Any] = {"state": kyma.state}
        if kyma.conditions:
            status["conditions"] = kyma.conditions
        if kyma.last_operation:
            status["lastOperation"] = kyma.last_operation
        if kyma.module_status:
            status["modules"] = kyma.module_status
        if kyma.active_channel:
            status["activeChannel"] = kyma.active_channel
        return {
            **self.header(),
            "metadata": self.metadata(
                kyma, labels={RUNTIME_ID_LABEL: kyma.runtime_id}, annotations=annotations
            ),
            "spec": spec,
            "status": status,
        }


@register
class ModuleKind(ResourceKind):
    """A catalog entry: channels, the module CR in the runtime, its default, and its manager.
    ``spec.mandatory: true`` (or upstream's label ``operator.kyma-project.io/mandatory-module:
    "true"``) makes it a mandatory module: every runtime gets it."""

    api_version = FLEET_API_VERSION
    kind = "Module"
    plural = "modules"
    aliases = ("module", "mod")
    namespaced = False
    model = Module
    apply_order = 10
    field_paths = {
        "mandatory": "spec.mandatory",
        "channels": "spec.channels",
        "cr_group": "spec.resource.group",
        "cr_version": "spec.resource.version",
        "cr_kind": "spec.resource.kind",
        "cr_plural": "spec.resource.plural",
        "cr_namespace": "spec.resource.namespace",
        "cr_name": "spec.resource.name",
        "default_cr": "spec.defaultCR",
        "manager": "spec.manager.name",
        "manager_url": "spec.manager.url",
        "manifest_namespaces": "spec.manifestPolicy.namespaces",
        "manifest_kinds": "spec.manifestPolicy.kinds",
        "versions": "spec.versions",
        "rollout_policy": "spec.rolloutPolicy",
    }

    def extra_columns(self) -> list:
        return [
            ("KIND", lambda m: m.cr_kind),
            ("MANDATORY", lambda m: "yes" if m.mandatory else "-"),
            ("CHANNELS", lambda m: ",".join(f"{c}={v}" for c, v in m.channels.items())),
            ("MANAGER", lambda m: m.manager or "-"),
        ]

    def spec_schema(self) -> dict:
        resource = schema.obj(
            {
                "group": schema.STRING,
                "version": schema.string(min_length=1),
                "kind": schema.string(min_length=1),
                "plural": schema.string(min_length=1),
                "namespace": schema.STRING,
                "name": schema.STRING,
            },
            required=("version", "kind", "plural"),
        )
        manager = schema.obj({"name": schema.STRING, "url": schema.STRING})
        policy = schema.obj({"namespaces": NAMESPACES_SCHEMA, "kinds": KINDS_SCHEMA})
        return schema.obj(
            {
                "mandatory": schema.BOOLEAN,
                "channels": CHANNELS_SCHEMA,
                "resource": resource,
                "defaultCR": DEFAULT_CR_SCHEMA,
                "manager": manager,
                "manifestPolicy": policy,
                "versions": VERSIONS_SCHEMA,
                "rolloutPolicy": POLICY_SCHEMA,
            },
            required=("channels", "resource"),
        )

    def _apply(self, doc: dict[str, Any]) -> tuple[Module, bool]:
        spec, metadata = doc.get("spec") or {}, doc["metadata"]
        resource, manager = spec["resource"], spec.get("manager") or {}
        policy = spec.get("manifestPolicy") or {}
        labels = dict(metadata.get("labels") or {})
        # Upstream's label of a mandatory module's template says it as well as spec.mandatory.
        mandatory = labels.pop(MANDATORY_LABEL, "").lower() == "true" or bool(spec.get("mandatory"))
        return module_services.module_apply(
            name=metadata["name"],
            labels=labels,
            annotations=metadata.get("annotations"),
            mandatory=mandatory,
            channels=spec["channels"],
            cr_group=resource.get("group", ""),
            cr_version=resource["version"],
            cr_kind=resource["kind"],
            cr_plural=resource["plural"],
            cr_namespace=resource.get("namespace") or "kyma-system",
            cr_name=resource.get("name") or "default",
            default_cr=spec.get("defaultCR") or {},
            manager=manager.get("name", ""),
            manager_url=manager.get("url", ""),
            manifest_namespaces=policy.get("namespaces") or [],
            manifest_kinds=policy.get("kinds") or [],
            versions=spec.get("versions") or [],
            rollout_policy=spec.get("rolloutPolicy") or {},
        )

    def to_document(self, module: Module) -> dict[str, Any]:
        spec: dict[str, Any] = {
            **({"mandatory": True} if module.mandatory else {}),
            "channels": module.channels,
            "resource": {
                "group": module.cr_group,
                "version": module.cr_version,
                "kind": module.cr_kind,
                "plural": module.cr_plural,
                "namespace": module.cr_namespace,
                "name": module.cr_name,
            },
        }
        if module.default_cr:
            spec["defaultCR"] = module.default_cr
        if module.manager or module.manager_url:
            spec["manager"] = {"name": module.manager, "url": module.manager_url}
        if module.manifest_namespaces or module.manifest_kinds:
            spec["manifestPolicy"] = {
                "namespaces": module.manifest_namespaces,
                "kinds": module.manifest_kinds,
            }
        if module.versions:
            spec["versions"] = module.versions
        if module.rollout_policy:
            spec["rolloutPolicy"] = module.rollout_policy
        labels = {MANDATORY_LABEL: "true"} if module.mandatory else {}
        return {**self.header(), "metadata": self.metadata(module, labels=labels), "spec": spec}


@register
class ModuleConfigKind(ResourceKind):
    """Read-only document of a module's configuration in one runtime (revision = resourceVersion)."""

    api_version = FLEET_API_VERSION
    kind = "ModuleConfig"
    plural = "moduleconfigs"
    aliases = ("moduleconfig", "mc")
    default_namespace = DEFAULT_NAMESPACE
    model = ModuleConfig
    appliable = False
    read_only_reason = (
        "ModuleConfigs are written by the control plane from the runtime's module CR; module managers "
        "report status with PUT /api/v1/moduleconfigs/{id}/status/"
    )

    def spec_schema(self) -> dict:
        return {"type": "object"}

    def extra_columns(self) -> list:
        return [
            ("KYMA", lambda c: c.kyma.name),
            ("MODULE", lambda c: c.module.name),
            ("REVISION", lambda c: c.revision),
            ("STATE", lambda c: c.status.get("state") or "-"),
        ]

    def queryset(self) -> QuerySet:
        return ModuleConfig.objects.select_related("kyma", "module")

    def to_document(self, config: ModuleConfig) -> dict[str, Any]:
        labels = {KYMA_NAME_LABEL: config.kyma.name, MODULE_NAME_LABEL: config.module.name}
        return {
            **self.header(),
            "metadata": self.metadata(config, labels=labels, resourceVersion=str(config.revision)),
            "spec": {
                "kyma": config.kyma.name,
                "runtimeID": config.kyma.runtime_id,
                "module": config.module.name,
                "version": config.version,
                "resource": config.spec,
                "source": {
                    "generation": config.source_generation,
                    "resourceVersion": config.source_resource_version,
                },
            },
            "status": config.status,
        }


@register
class SyncResourceKind(ResourceKind):
    """Manifests a module manager wants in one runtime (``spec.kyma`` names the Kyma)."""

    api_version = FLEET_API_VERSION
    kind = "SyncResource"
    plural = "syncresources"
    aliases = ("syncresource", "sr")
    default_namespace = DEFAULT_NAMESPACE
    model = SyncResource
    apply_order = 40
    field_paths = {
        "manifests": "spec.manifests",
        "apply_strategy": "spec.applyStrategy",
        "deletion_policy": "spec.deletionPolicy",
        "kyma": "spec.kyma",
        "module": "spec.module",
    }

    def extra_columns(self) -> list:
        return [
            ("KYMA", lambda r: r.kyma.name),
            ("MODULE", lambda r: r.module.name),
            ("STATE", lambda r: r.state),
        ]

    def spec_schema(self) -> dict:
        return schema.obj(
            {
                "kyma": schema.string(pattern=schema.DNS_SUBDOMAIN),
                "module": schema.string(pattern=schema.DNS_LABEL),
                "manifests": schema.string(min_length=1),
                "applyStrategy": schema.enum(*ApplyStrategy.values),
                "deletionPolicy": schema.enum(*DeletionPolicy.values),
            },
            required=("kyma", "module", "manifests"),
        )

    def queryset(self) -> QuerySet:
        return SyncResource.objects.select_related("kyma", "module")

    def existing_document(self, doc: dict[str, Any]) -> dict[str, Any] | None:
        namespace, name = self.identity(doc)
        spec = doc.get("spec") or {}
        obj = (
            self.select(namespace, name)
            .filter(kyma__name=spec.get("kyma"), module__name=spec.get("module"))
            .first()
        )
        return self.to_document(obj) if obj is not None else None

    def _apply(self, doc: dict[str, Any]) -> tuple[SyncResource, bool]:
        namespace, name = self.identity(doc)
        spec, metadata = doc["spec"], doc["metadata"]
        kyma = Kyma.objects.filter(namespace=namespace, name=spec["kyma"]).first()
        if kyma is None:
            raise ValidationFailed(
                "unknown Kyma", errors=[("spec.kyma", f"no Kyma {namespace}/{spec['kyma']} (same namespace)")]
            )
        module = Module.objects.filter(name=spec["module"]).first()
        if module is None:
            raise ValidationFailed(
                "unknown module", errors=[("spec.module", f"no module {spec['module']!r}")]
            )
        return module_services.syncresource_apply(
            kyma=kyma,
            module=module,
            name=name,
            manifests=spec["manifests"],
            apply_strategy=spec.get("applyStrategy", ApplyStrategy.SERVER_SIDE_APPLY),
            deletion_policy=spec.get("deletionPolicy", DeletionPolicy.DELETE),
            labels=metadata.get("labels"),
            annotations=metadata.get("annotations"),
        )

    def to_document(self, resource: SyncResource) -> dict[str, Any]:
        return {
            **self.header(),
            "metadata": self.metadata(resource),
            "spec": {
                "kyma": resource.kyma.name,
                "module": resource.module.name,
                "manifests": resource.manifests,
                "applyStrategy": resource.apply_strategy,
                "deletionPolicy": resource.deletion_policy,
            },
            "status": {
                "state": resource.state,
                "observedGeneration": resource.observed_generation,
                "manifests": resource.manifest_status,
            },
        }


@register
class KubeconfigSecretKind(ResourceKind):
    """Upstream's access Secret: ``data.config`` holds the kubeconfig of the Kyma named by the
    ``operator.kyma-project.io/kyma-name`` label. Write-only: it is never listed or shown."""

    api_version = "v1"
    kind = "Secret"
    plural = "secrets"
    verbose_name = "kubeconfig Secret"
    default_namespace = DEFAULT_NAMESPACE
    model = Kyma
    apply_order = 35
    listable = False

    @property
    def schema(self) -> dict:  # type: ignore[override]
        return schema.obj(
            {
                "apiVersion": {"const": "v1"},
                "kind": {"const": "Secret"},
                "metadata": schema.metadata(namespaced=True),
                "type": schema.STRING,
                "data": schema.obj({"config": schema.STRING}, additional=True),
                "stringData": schema.obj({"config": schema.STRING}, additional=True),
            },
            required=("apiVersion", "kind", "metadata"),
        )

    def existing_document(self, doc: dict[str, Any]) -> None:
        return None

    def _kubeconfig(self, doc: dict[str, Any]) -> str:
        if "config" in (doc.get("stringData") or {}):
            return doc["stringData"]["config"]
        encoded = (doc.get("data") or {}).get("config")
        if encoded is None:
            raise ValidationFailed("no kubeconfig", errors=[("data.config", "required field is missing")])
        try:
            return base64.b64decode(encoded, validate=True).decode()
        except (binascii.Error, UnicodeDecodeError) as exc:
            raise ValidationFailed(
                "bad base64", errors=[("data.config", "is not base64 of UTF-8 text")]
            ) from exc

    def _apply(self, doc: dict[str, Any]) -> tuple[Kyma, bool]:
        namespace, _ = self.identity(doc)
        kyma_name = (doc["metadata"].get("labels") or {}).get(KYMA_NAME_LABEL)
        if not kyma_name:
            raise ValidationFailed(
                "not a kubeconfig secret",
                errors=[
                    (f"metadata.labels.{KYMA_NAME_LABEL}", "required: names the Kyma this kubeconfig is for")
                ],
            )
        kyma = Kyma.objects.filter(namespace=namespace, name=kyma_name).first()
        if kyma is None:
            raise NotFound(f"no Kyma {namespace}/{kyma_name} for this kubeconfig secret")
        kyma_services.kyma_set_kubeconfig(kyma=kyma, kubeconfig=self._kubeconfig(doc))
        return kyma, False

    def to_document(self, kyma: Kyma) -> dict[str, Any]:
        # The stored kubeconfig is never rendered; the result line names the Kyma it went to.
        return {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": kyma.name, "namespace": kyma.namespace},
        }
