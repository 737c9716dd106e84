"""The runtime steps: every kind the control plane owns in a runtime, declared once.

The engine runs :data:`REGISTRY`'s steps in ``order``, the deletion in ``removal`` order, the
runtime-access rules (``deploy/runtime-access/``) are the kinds' ``access`` merged, the runtime
watcher reports changes of the ``watched`` kinds, and the docs' table of what runtimes get is
rendered from the kinds (see :mod:`.registry` for the parts, and the contributor page "Add a kind
to what runtimes get" for how to add one).
"""

from __future__ import annotations

import functools

from fleet.models.module import MANDATORY_LABEL
from watchers import rendering

from . import catalog, modules, runtime_kyma, sync_resources, watcher_resources
from .catalog_crds import module_release_meta_crd, module_template_crd
from .kyma_crd import CRD_NAME
from .kyma_crd import GROUP as KYMA_GROUP
from .registry import READ, WRITE, OwnedKind, Read, Registry, Rule, RuntimeStep

NAMESPACE = runtime_kyma.NAMESPACE  # the namespace the control plane manages: kyma-system
CRD_API = "apiextensions.k8s.io/v1"
RW = (*READ, *WRITE)


def _crd_rules(*names: str) -> tuple[Rule, ...]:
    # Any CRD may be read (a module CR's scope comes from its CRD); only ours written, by name
    # (server-side apply creates with a PATCH to the name, which RBAC can limit).
    return (
        Rule("apiextensions.k8s.io", ("customresourcedefinitions",), READ, cluster=True),
        Rule(
            "apiextensions.k8s.io", ("customresourcedefinitions",), ("create", "patch", "update"), names, True
        ),
    )


KYMA_CRD = OwnedKind(
    CRD_API,
    "CustomResourceDefinition",
    "customresourcedefinitions",
    namespaced=False,
    names=(CRD_NAME,),
    read=Read.RECHECKED,
    watched=True,
    repair="applied again (server-side apply)",
    deleted="never: it stays, as the runtime's users may hold Kymas of it",
    description="the Kyma's CRD, with the control plane's own schema (a bad edit is refused at once)",
    access=_crd_rules(CRD_NAME),
)
MANAGED_NAMESPACE = OwnedKind(
    "v1",
    "Namespace",
    "namespaces",
    namespaced=False,
    names=(NAMESPACE,),
    read=Read.CREATED,
    repair="created when missing; never changed (the guard refuses any change or deletion of it)",
    deleted="never",
    description="the namespace the control plane manages",
    # get, and create by server-side apply (authorized as patch and create of the name)
    access=(Rule("", ("namespaces",), ("get", "create", "patch"), (NAMESPACE,), cluster=True),),
)
RUNTIME_KYMA = OwnedKind(
    runtime_kyma.API_VERSION,
    "Kyma",
    "kymas",
    namespaced=True,
    names=(runtime_kyma.NAME,),
    read=Read.EVENTS,
    repair="spec both ways (the side whose generation moved wins; the runtime when both did); "
    "its status is the control plane's Kyma status, whole",
    deleted="last, with the Kyma",
    description="the runtime's Kyma: what its users edit (modules, channel) and where they read the status",
    access=(Rule(KYMA_GROUP, ("kymas", "kymas/status"), RW),),
)

PRIORITY_CLASS = OwnedKind(
    "scheduling.k8s.io/v1",
    "PriorityClass",
    "priorityclasses",
    namespaced=False,
    names=(rendering.PRIORITY_CLASS_NAME,),
    read=Read.RECHECKED,
    watched=True,
    repair="applied again; replaced when its value must change (a value cannot be updated)",
    deleted="with the Kyma, after the watcher's pod",
    description="keeps the runtime watcher scheduled when the runtime is short of resources",
    access=(
        Rule("scheduling.k8s.io", ("priorityclasses",), ("list",), cluster=True),
        Rule(
            "scheduling.k8s.io", ("priorityclasses",), ("get", *WRITE), (rendering.PRIORITY_CLASS_NAME,), True
        ),
    ),
)
NETWORK_POLICIES = OwnedKind(
    "networking.k8s.io/v1",
    "NetworkPolicy",
    "networkpolicies",
    namespaced=True,
    names=rendering.NETWORK_POLICIES,
    read=Read.RECHECKED,
    watched=True,
    repair="applied again (server-side apply)",
    deleted="with the Kyma",
    description="let the runtime watcher through a deny-all namespace: admission calls, events to the "
    "listener, DNS, scraping",
    access=(Rule("networking.k8s.io", ("networkpolicies",), RW),),
)
WATCHER_SECRETS = OwnedKind(
    "v1",
    "Secret",
    "secrets",
    namespaced=True,
    names=(rendering.SECRET_NAME, rendering.PULL_SECRET_NAME),
    read=Read.EVERY,
    repair="applied again (server-side apply)",
    deleted="with the Kyma",
    description="the runtime watcher's certificate and key (and its image pull secret, when one is set)",
    access=(Rule("", ("secrets",), RW),),
)
WATCHER_SERVICES = OwnedKind(
    "v1",
    "Service",
    "services",
    namespaced=True,
    names=(rendering.NAME, rendering.METRICS_SERVICE_NAME),
    read=Read.RECHECKED,
    watched=True,
    repair="applied again (server-side apply): its selector included",
    deleted="with the Kyma",
    description="the runtime watcher's webhook and metrics endpoints",
    access=(Rule("", ("services",), RW),),
)
WATCHER_DEPLOYMENT = OwnedKind(
    "apps/v1",
    "Deployment",
    "deployments",
    namespaced=True,
    names=(rendering.NAME,),
    read=Read.EVERY,
    repair="applied again (server-side apply); without a ready pod, every watcher object is read too",
    deleted="with the Kyma, after its webhooks",
    description="the runtime watcher",
    access=(Rule("apps", ("deployments",), RW),),
)
WATCHER_PODS = OwnedKind(
    "v1",
    "Pod",
    "pods",
    namespaced=True,
    read=Read.EVERY,
    repair="none: the Deployment's (read only, to say why the watcher does not run)",
    deleted="with the Deployment (garbage collected)",
    description="the runtime watcher's pods, read while it is not ready",
    access=(Rule("", ("pods",), READ),),
)
WEBHOOKS = OwnedKind(
    "admissionregistration.k8s.io/v1",
    "ValidatingWebhookConfiguration",
    "validatingwebhookconfigurations",
    namespaced=False,
    names=(rendering.NAME,),
    read=Read.EVERY,  # (an API server never calls webhooks for webhook configurations)
    repair="applied again (server-side apply): a removed webhook is drift",
    deleted="with the Kyma, first",
    description="one webhook per Watcher, one for module CRs, one for the control plane's own objects",
    access=(
        Rule("admissionregistration.k8s.io", ("validatingwebhookconfigurations",), ("list",), cluster=True),
        Rule(
            "admissionregistration.k8s.io",
            ("validatingwebhookconfigurations",),
            ("get", *WRITE),
            (rendering.NAME,),
            True,
        ),
    ),
)

MODULE_CRS = OwnedKind(
    f"{KYMA_GROUP}/*",
    "*",
    "*",
    namespaced=True,
    read=Read.EVENTS,
    repair="created when missing (policy CreateAndDelete); its spec is the user's, never corrected",
    deleted="when its module leaves the Kyma (or the catalog, a mandatory one) and first with the Kyma; "
    "a finalizer holds the deletion until its operator is done (purged after KYMA_PURGE_AFTER)",
    description=f"each module's CR (a mandatory module's labelled {MANDATORY_LABEL}); a CR outside "
    f"{KYMA_GROUP} or {NAMESPACE} needs the module's rules (runtime_access --modules)",
    access=(Rule(KYMA_GROUP, ("*",), RW),),
)

CATALOG_CRDS = OwnedKind(
    CRD_API,
    "CustomResourceDefinition",
    "customresourcedefinitions",
    namespaced=False,
    names=tuple(crd()["metadata"]["name"] for crd in (module_template_crd, module_release_meta_crd)),
    read=Read.RECHECKED,
    watched=True,
    repair="applied again (server-side apply)",
    deleted="never: they stay, as the Kyma's does",
    description="the CRDs of the catalog's mirror (ModuleTemplate, ModuleReleaseMeta)",
    access=_crd_rules(*(crd()["metadata"]["name"] for crd in (module_template_crd, module_release_meta_crd))),
)
MODULE_TEMPLATES = OwnedKind(
    catalog.API_VERSION,
    "ModuleTemplate",
    "moduletemplates",
    namespaced=True,
    read=Read.RECHECKED,
    watched=True,
    repair="applied again; a template no channel names any more is deleted",
    deleted="with the Kyma",
    description="one per module version a channel offers this runtime (mandatory modules are not mirrored)",
    access=(Rule(KYMA_GROUP, ("moduletemplates",), RW),),
)
MODULE_RELEASE_METAS = OwnedKind(
    catalog.API_VERSION,
    "ModuleReleaseMeta",
    "modulereleasemetas",
    namespaced=True,
    read=Read.RECHECKED,
    watched=True,
    repair="applied again; one of a module that left the catalog is deleted",
    deleted="with the Kyma",
    description="one per module: each channel with the version this runtime gets",
    access=(Rule(KYMA_GROUP, ("modulereleasemetas",), RW),),
)


def _workload(api_version: str, kind: str, plural: str) -> OwnedKind:
    group = api_version.rpartition("/")[0]
    return OwnedKind(
        api_version,
        kind,
        plural,
        namespaced=True,
        read=Read.EVERY,
        repair="applied again (server-side apply) when a field the manifest sets differs",
        deleted="pruned when it leaves its SyncResource (unless Orphan); with the Kyma after the module CRs",
        description="what module managers' manifests hold (their operators' workloads)",
        access=(Rule(group, (plural,), RW),),
    )


# The namespaced kinds module managers' manifests may hold in kyma-system without module rules.
WORKLOADS = tuple(
    _workload(api_version, kind, plural)
    for api_version, kind, plural in (
        ("v1", "ConfigMap", "configmaps"),
        ("v1", "Secret", "secrets"),
        ("v1", "Service", "services"),
        ("v1", "ServiceAccount", "serviceaccounts"),
        ("v1", "PersistentVolumeClaim", "persistentvolumeclaims"),
        ("apps/v1", "Deployment", "deployments"),
        ("apps/v1", "StatefulSet", "statefulsets"),
        ("apps/v1", "DaemonSet", "daemonsets"),
        ("batch/v1", "Job", "jobs"),
        ("batch/v1", "CronJob", "cronjobs"),
        ("autoscaling/v2", "HorizontalPodAutoscaler", "horizontalpodautoscalers"),
        ("policy/v1", "PodDisruptionBudget", "poddisruptionbudgets"),
        ("networking.k8s.io/v1", "NetworkPolicy", "networkpolicies"),
        ("rbac.authorization.k8s.io/v1", "Role", "roles"),
        ("rbac.authorization.k8s.io/v1", "RoleBinding", "rolebindings"),
    )
)

WATCHER_KINDS = (PRIORITY_CLASS, NETWORK_POLICIES, WATCHER_SECRETS, WATCHER_SERVICES, WATCHER_DEPLOYMENT)
WATCHER_KINDS += (WATCHER_PODS, WEBHOOKS)
# What the runtime watcher's webhook for owned objects reports (every step's watched kinds).
WATCHED = tuple(
    dict.fromkeys(
        (kind.group, kind.version, kind.plural, kind.namespaced)
        for kind in (KYMA_CRD, *WATCHER_KINDS, CATALOG_CRDS, MODULE_TEMPLATES, MODULE_RELEASE_METAS)
        if kind.watched
    )
)

REGISTRY = Registry(
    (
        RuntimeStep(
            "runtime-kyma",
            "the Kyma's CRD, the namespace and the runtime's Kyma, both ways (the first call: when it "
            "answers, the runtime is reachable)",
            (KYMA_CRD, MANAGED_NAMESPACE, RUNTIME_KYMA),
            render=runtime_kyma.render,
            sync=runtime_kyma.step,
            remove=runtime_kyma.remove,
            order=10,
            removal=50,
        ),
        RuntimeStep(
            watcher_resources.STEP,
            "the runtime watcher: its certificate, objects and webhooks, its readiness and heartbeat",
            WATCHER_KINDS,
            render=functools.partial(watcher_resources.render, watched=WATCHED),
            sync=functools.partial(watcher_resources.step, watched=WATCHED),
            remove=watcher_resources.remove,
            order=20,
            removal=40,
        ),
        RuntimeStep(
            modules.STEP,
            "each module's CR (the Kyma's modules and the catalog's mandatory ones), its ModuleConfig "
            "for the module's manager, and its state",
            (MODULE_CRS,),
            render=modules.render,
            sync=modules.step,
            remove=modules.remove,
            order=30,
            removal=10,
            ahead=modules.ahead,
        ),
        RuntimeStep(
            catalog.STEP,
            "the module catalog mirrored in upstream's shapes",
            (CATALOG_CRDS, MODULE_TEMPLATES, MODULE_RELEASE_METAS),
            render=catalog.render,
            sync=catalog.sync,
            remove=catalog.remove,
            order=40,
            removal=30,
            ahead=catalog.ahead,
        ),
        RuntimeStep(
            "sync-resources",
            "the module managers' manifests (SyncResources), applied by their strategy",
            WORKLOADS,
            render=sync_resources.render,
            sync=sync_resources.sync,
            remove=sync_resources.remove,
            order=50,
            removal=20,
        ),
    )
)
