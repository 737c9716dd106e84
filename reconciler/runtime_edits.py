"""Changing a runtime's Kyma the way its user would: ``kubectl patch`` on ``kyma-system/default``.

For people trying the control plane (the demo's simulated user, ``manage.py runtime_edit``) and for
operators who must correct a runtime by hand. The change goes through the runtime's own API server,
so its admission webhook, the runtime watcher, the listener and the reconcile see it exactly as
they see a user's edit; the control plane's copy follows once the reconcile has read it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.core.exceptions import ValidationError

from fleet.k8s.client import RuntimeAPIError, client_for
from fleet.models import Kyma, Module
from kernel.errors import ApplicationError, NotFound, ValidationFailed
from reconciler.modules import module_resource
from reconciler.runtime_kyma import API_VERSION, NAME, NAMESPACE

FIELD_MANAGER = "runtime-user"


class RuntimeUnavailable(ApplicationError):
    """The runtime could not be reached or refused the change."""

    status_code = 502
    code = "runtime_unavailable"


def runtime_kyma_edit(
    *, kyma: Kyma, channel: str | None = None, enable: Iterable[str] = (), disable: Iterable[str] = ()
) -> dict[str, Any]:
    """Patch the runtime's Kyma spec; returns the fields that changed (``{}``: nothing to do)."""
    enable, disable = list(enable), list(disable)
    if channel is not None:
        try:
            Kyma._meta.get_field("channel").clean(channel, kyma)
        except ValidationError as exc:
            raise ValidationFailed(
                f"invalid channel {channel!r}", errors=[("channel", m) for m in exc.messages]
            ) from exc
    both = sorted(set(enable) & set(disable))
    if both:
        raise ValidationFailed(f"modules both enabled and disabled: {', '.join(both)}")
    if not kyma.kubeconfig:
        raise ValidationFailed(f"Kyma {kyma.key} has no kubeconfig: its runtime cannot be reached")
    client = client_for(kyma.pk, kyma.kubeconfig)  # the worker's cached client, kept open
    try:
        live = client.get(API_VERSION, "Kyma", NAME, NAMESPACE)
        if live is None:
            raise NotFound(
                f"the runtime of {kyma.key} has no Kyma {NAMESPACE}/{NAME} yet (is it reconciled?)"
            )
        spec = live.get("spec") or {}
        modules = [
            m for m in spec.get("modules") or [] if not (isinstance(m, dict) and m.get("name") in disable)
        ]
        present = {m.get("name") for m in modules if isinstance(m, dict)}
        modules += [{"name": name} for name in dict.fromkeys(enable) if name not in present]
        changes: dict[str, Any] = {}
        if channel is not None and channel != spec.get("channel"):
            changes["channel"] = channel
        if modules != (spec.get("modules") or []):
            changes["modules"] = modules
        if changes:
            client.patch(API_VERSION, "Kyma", NAME, NAMESPACE, {"spec": changes}, field_manager=FIELD_MANAGER)
        return changes
    except RuntimeAPIError as exc:
        raise RuntimeUnavailable(f"runtime of {kyma.key}: {exc.message}") from exc


def runtime_module_edit(*, kyma: Kyma, module: str, spec: dict[str, Any]) -> dict[str, Any]:
    """Merge ``spec`` into the module CR's spec inside the runtime (``kubectl patch --type=merge``,
    as the runtime's user); returns the fields that changed (``{}``: nothing to do). The
    module-CR webhook reports it, the reconcile copies it into the ModuleConfig, and the module's
    manager answers with manifests."""
    catalog = Module.objects.filter(name=module).first()
    if catalog is None:
        raise ValidationFailed(f"unknown module {module!r}", errors=[("module", "not in the module catalog")])
    if not spec:
        raise ValidationFailed("nothing to change", errors=[("spec", "give at least one FIELD=VALUE")])
    if not kyma.kubeconfig:
        raise ValidationFailed(f"Kyma {kyma.key} has no kubeconfig: its runtime cannot be reached")
    doc = module_resource(catalog, kyma.runtime_id)
    meta = doc["metadata"]
    client = client_for(kyma.pk, kyma.kubeconfig)
    try:
        live = client.get(doc["apiVersion"], doc["kind"], meta["name"], meta["namespace"])
        if live is None:
            raise NotFound(
                f"the runtime of {kyma.key} has no {doc['kind']} {meta['namespace']}/{meta['name']} "
                f"(is {module} enabled and reconciled?)"
            )
        current = live.get("spec") or {}
        changes = {key: value for key, value in spec.items() if current.get(key) != value}
        if changes:
            client.patch(
                doc["apiVersion"],
                doc["kind"],
                meta["name"],
                meta["namespace"],
                {"spec": changes},
                field_manager=FIELD_MANAGER,
            )
        return changes
    except RuntimeAPIError as exc:
        raise RuntimeUnavailable(f"runtime of {kyma.key}: {exc.message}") from exc
