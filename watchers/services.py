"""Writes of Watchers. Any change reaches every runtime's webhook configuration."""

from __future__ import annotations

from celery import current_app
from django.db import transaction

from fleet.models import RolloutKind, RuntimeSync
from fleet.rollouts.services import subject_rollouts_end
from kernel.errors import Conflict
from kernel.services import deletion_begin, resource_save, stored_spec, upsert

from .models import DEFAULT_GATEWAY, Watcher
from .rollouts import watcher_changed
from .status import marked_uid, watchers_status_refresh

FANOUT_TASK = "controlplane.kyma_reconcile_fanout"


def _fan_out(reason: str) -> None:
    """Reconcile every Kyma, in batches, from a worker (published by the task's stable name: the
    fleet's task module sits above this app)."""
    transaction.on_commit(lambda: current_app.send_task(FANOUT_TASK, args=[reason]))


def watcher_save(watcher: Watcher) -> bool:
    """Validate and store a Watcher; on change every Kyma is reconciled (in batches), or, when
    its webhook entry changed and more than one runtime has one, the change goes out in a
    rollout whose waves reconcile them (``watchers.rollouts``).

    Its status is computed at once (a changed spec is Processing until the runtimes carry it).
    """
    if watcher.is_deleting:
        raise Conflict(f"Watcher {watcher.key} is being deleted; it cannot be changed")
    # Upstream's default gateway selector, written out so the stored spec says what applies.
    watcher.gateway = watcher.gateway or DEFAULT_GATEWAY
    with transaction.atomic():
        before = Watcher.objects.filter(pk=watcher.pk).first() if watcher.pk else None
        changed = resource_save(watcher, before=stored_spec(watcher))
        if changed and watcher_changed(watcher, before) is None:
            _fan_out(f"watcher {watcher.key} changed")
        watchers_status_refresh(watchers=[watcher])
    return changed


@transaction.atomic
def watcher_apply(
    *,
    namespace: str,
    name: str,
    resource_to_watch: dict,
    service_info: dict,
    manager: str = "",
    field: str = "spec",
    labels_to_watch: dict | None = None,
    gateway: dict | None = None,
    labels: dict | None = None,
    annotations: dict | None = None,
) -> tuple[Watcher, bool]:
    """Create the Watcher ``namespace/name`` or make the stored one match."""
    fields = {
        "manager": manager,
        "labels_to_watch": labels_to_watch or {},
        "resource_to_watch": resource_to_watch,
        "field": field,
        "service_info": service_info,
        "gateway": gateway or {},
        "labels": labels or {},
        "annotations": annotations or {},
    }
    return upsert(Watcher, {"namespace": namespace, "name": name}, fields, watcher_save)


def watcher_delete(*, watcher: Watcher) -> bool:
    """Begin deleting a Watcher: it stays (Deleting) until no runtime's webhook uses it."""
    with transaction.atomic():
        subject_rollouts_end(RolloutKind.WATCHER, watcher.key, f"Watcher {watcher.key} was deleted")
        if deletion_begin(watcher):
            _fan_out(f"watcher {watcher.key} deleted")
            return True
        Watcher.objects.filter(pk=watcher.pk).update(state="Deleting")
        watcher.state = "Deleting"
        _fan_out(f"watcher {watcher.key} deleting")
    return False


def watchers_finalize() -> list[str]:
    """Second step of a Watcher's deletion: once no Kyma's applied webhooks name it, it goes.

    A Kyma records the Watchers of the webhook configuration it applied
    (``RuntimeSync.applied_watchers``); the reconciles that the deletion fanned out drop the
    Watcher from every reachable runtime.
    """
    deleting = {str(w.uid): w for w in Watcher.objects.filter(deletion_timestamp__isnull=False)}
    if not deleting:
        return []
    in_use: set[str] = set()
    applied_lists = RuntimeSync.objects.exclude(applied_watchers=[]).values_list(
        "applied_watchers", flat=True
    )
    for applied in applied_lists.iterator():
        in_use.update(marked_uid(mark) for mark in applied)
    gone = []
    for uid, watcher in deleting.items():
        if uid not in in_use:
            watcher.delete()
            gone.append(watcher.key)
    return gone
