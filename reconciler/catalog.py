"""The module catalog mirrored into each runtime, in upstream's shapes (namespace ``kyma-system``).

What a runtime's users may enable, so that they see it with kubectl (upstream's
``internal/remote/remote_catalog.go`` does the same): for every module of the catalog a
**ModuleReleaseMeta** named after it (``spec.channels``: each channel with the version *this*
runtime gets, so a rollout's old version until its wave) and a **ModuleTemplate**
``<module>-<version>`` for each version those channels name (``spec.moduleName``, ``version``,
``requiresDowntime``, ``data``: the module's default CR). Their CRDs (:mod:`.catalog_crds`) come
first. A version no channel names any more, or a module that left the catalog, is deleted.

Reads: every object is rechecked every ``RUNTIME_RECHECK_INTERVAL`` (a labelled list per kind,
only when one is due), and whenever its content changes (a catalog change; then a list per kind
too, since a changed object is compared with the runtime's before it is applied); between those,
a reconcile reads none of them. So a no-op reconcile reads nothing more than before, a drifted
object (``kubectl edit mt keda-1.0.0``) is put back within the recheck interval, and the runtime
reads of a catalog change are one list per kind. A new runtime's first reconcile reads nothing:
it creates everything. A deleted Kyma takes its mirror with it (:func:`remove`); the CRDs stay,
as the Kyma's does.
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Iterable
from typing import Any

from fleet.k8s.client import Gone, RuntimeClient
from fleet.k8s.ownership import MANAGED_BY_LABEL, MANAGED_BY_VALUE, MANAGED_SELECTOR
from fleet.k8s.parallel import all_at_once
from fleet.models import Module
from kernel.documents.hashing import stamped

from .apply import apply_ahead, apply_all, key_of, needs_check, never_seen, prefetch
from .catalog_crds import VERSION, module_release_meta_crd, module_template_crd
from .context import ReconcileContext
from .kyma_crd import GROUP

STEP = "module-catalog"  # (its name in the registry: reconciler.steps)
NAMESPACE = "kyma-system"
API_VERSION = f"{GROUP}/{VERSION}"
MODULE_NAME_LABEL = "operator.kyma-project.io/module-name"
KINDS = ("ModuleReleaseMeta", "ModuleTemplate")
# A CRD just created may take a moment to be served: the catalog is applied again this soon.
CRD_SETTLING = dt.timedelta(seconds=5)


def template_name(module: str, version: str) -> str:
    """Upstream's name of a module version's template."""
    return f"{module}-{version}"


def _metadata(name: str, module: str) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": NAMESPACE,
        "labels": {MANAGED_BY_LABEL: MANAGED_BY_VALUE, MODULE_NAME_LABEL: module},
    }


def module_template(module: Module, version: str) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "ModuleTemplate",
        "metadata": _metadata(template_name(module.name, version), module.name),
        "spec": {
            "moduleName": module.name,
            "version": version,
            "mandatory": False,
            "requiresDowntime": module.requires_downtime(version),
            "data": module.default_cr_object(),
            "descriptor": {},
        },
    }


def module_release_meta(module: Module, channels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "ModuleReleaseMeta",
        "metadata": _metadata(module.name, module.name),
        "spec": {
            "moduleName": module.name,
            "channels": [{"channel": channel, "version": channels[channel]} for channel in sorted(channels)],
        },
    }


def desired(ctx: ReconcileContext) -> list[dict[str, Any]]:
    """The runtime's catalog as it should be (stamped), this runtime's own versions included."""
    docs = []
    for module in sorted(ctx.catalog().values(), key=lambda m: m.name):
        if module.mandatory or module.is_deleting:
            continue  # upstream does not mirror mandatory modules: no runtime's user chooses them
        channels = {
            channel: version
            for channel in sorted(module.channels)
            if (version := ctx.targets.module_version(module, channel)) is not None
        }
        if not channels:
            continue
        docs.append(stamped(module_release_meta(module, channels)))
        docs.extend(stamped(module_template(module, version)) for version in sorted(set(channels.values())))
    return docs


def _desired_once(ctx: ReconcileContext) -> list[dict[str, Any]]:
    """:func:`desired`, rendered once per reconcile (``ctx.rendered``): a first reconcile's
    :func:`ahead` and :func:`sync` both need it, and nothing between them changes what it reads
    (the catalog and this runtime's targets, each read once per reconcile)."""
    if STEP not in ctx.rendered:
        ctx.rendered[STEP] = desired(ctx)
    return ctx.rendered[STEP]


def render(ctx: ReconcileContext) -> list[dict[str, Any]]:
    """What this step wants in the runtime: the mirror's CRDs, then the mirror."""
    return [*crds(), *desired(ctx)]


@functools.cache
def crds() -> list[dict[str, Any]]:
    """The catalog's two CRDs, rendered and hashed once per process; callers must not change them."""
    return [stamped(module_template_crd()), stamped(module_release_meta_crd())]


def _ours(key: str) -> bool:
    parts = key.split("|")
    return len(parts) == 4 and parts[0] == API_VERSION and parts[1] in KINDS and parts[2] == NAMESPACE


def ahead(ctx: ReconcileContext) -> None:
    """A new runtime's catalog CRDs (they need nothing another step makes), then its mirror, go
    with earlier steps' waves instead of round trips of their own (:func:`.apply.apply_ahead`)."""
    definitions = crds()
    if any(never_seen(ctx, crd) for crd in definitions):
        for crd in definitions:
            ctx.client.learn(crd)  # (the mirror's kinds need no discovery)
        apply_ahead(ctx, STEP, definitions)
        apply_ahead(ctx, STEP, _desired_once(ctx), after=definitions)


def sync(ctx: ReconcileContext) -> None:
    """Make the runtime's catalog match (see the module docstring for what it reads)."""
    definitions = crds()
    prefetch(ctx, [crd for crd in definitions if needs_check(ctx, crd)])
    for crd in definitions:
        ctx.client.learn(crd)
    apply_all(ctx, definitions, every_time=False)
    docs = _desired_once(ctx)
    wanted = {"|".join(key_of(doc)) for doc in docs}
    listed = []
    for kind in KINDS:
        of_kind = [doc for doc in docs if doc["kind"] == kind]
        due = [doc for doc in of_kind if needs_check(ctx, doc)]
        if due and not all(never_seen(ctx, doc) for doc in due):
            listed.append((kind, of_kind))
    client = ctx.client
    found: dict[str, dict[str, Any]] = {}
    lists = [functools.partial(_list, client, kind) for kind, _ in listed]
    answers = all_at_once(lists, idle=client.idle_connections)
    for (kind, of_kind), items in zip(listed, answers, strict=True):
        found.update(_found(ctx, kind, of_kind, items))
    try:
        apply_all(ctx, docs, every_time=False)
    except Gone:  # the CRDs were only just created: not served yet
        ctx.recheck(ctx.now + CRD_SETTLING)
        return
    stale = {key for key in ctx.verified if _ours(key) and key not in wanted} | {
        key for key in found if key not in wanted
    }
    _delete(ctx, stale)


def _list(client: RuntimeClient, kind: str) -> list[dict[str, Any]]:
    """The runtime's objects of ``kind`` with our label (one read)."""
    try:
        return client.list(API_VERSION, kind, NAMESPACE, labels=MANAGED_SELECTOR)
    except Gone:
        return []


def _found(
    ctx: ReconcileContext, kind: str, docs: Iterable[dict[str, Any]], items: list[dict[str, Any]]
) -> dict[str, dict[str, Any]]:
    """What the runtime holds of ``kind`` (``items``, listed) by key; ``docs``' copies are what the
    apply compares with."""
    by_name = {(item.get("metadata") or {}).get("name"): item for item in items}
    for doc in docs:
        ctx.listed[key_of(doc)] = by_name.get(doc["metadata"]["name"])
    return {"|".join((API_VERSION, kind, NAMESPACE, name)): item for name, item in by_name.items() if name}


def _delete(ctx: ReconcileContext, keys: Iterable[str]) -> None:
    for key in sorted(keys):
        api_version, kind, namespace, name = key.split("|", 3)
        ctx.client.delete(api_version, kind, name, namespace)
        ctx.verified.pop(key, None)
        ctx.change("removed", resource=f"{kind} {namespace}/{name}", action="deleted (left the catalog)")


def remove(ctx: ReconcileContext) -> list[tuple[str, str, str, str]]:
    """On Kyma deletion: the mirrored catalog goes (one list per kind); returns what a
    finalizer still holds."""
    left = []
    for kind in KINDS:
        try:
            items = ctx.client.list(API_VERSION, kind, NAMESPACE, labels=MANAGED_SELECTOR)
        except Gone:
            continue  # the CRD is not there: neither is anything of it
        for item in items:
            name = item["metadata"]["name"]
            if ctx.client.delete_pending(API_VERSION, kind, name, NAMESPACE) is not None:
                left.append((API_VERSION, kind, NAMESPACE, name))
    return left
