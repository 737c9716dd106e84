"""A comparison that found an object in place is not made again for the very same version of it
(``reconciler.drift``: same uid and resourceVersion, same desired content): any write to the
object in the runtime gives it a new resourceVersion, so drift is still found."""

from __future__ import annotations

import pytest
from django.utils import timezone

from fleet import queue
from fleet.models import ModuleConfig, ReconcileRecord
from fleet.services import modules as module_services
from reconciler.drift import in_place_as_compared, remember_in_place
from reconciler.run import kyma_reconcile_batch_run, kyma_reconcile_run
from tests.factories import beside

WHERE = (1, "cluster-a", "apps/v1", "Deployment", "kyma-system", "skr-webhook")
LIVE = {"metadata": {"uid": "u-1", "resourceVersion": "7"}}


def test_given_the_same_version_and_content_then_in_place_as_compared():
    remember_in_place(WHERE, LIVE, "hash-1", ())
    assert in_place_as_compared(WHERE, LIVE, "hash-1", ())


@pytest.mark.parametrize(
    ("where", "live", "digest", "managers"),
    [
        (WHERE, {"metadata": {"uid": "u-1", "resourceVersion": "8"}}, "hash-1", ()),  # written since
        (WHERE, {"metadata": {"uid": "u-2", "resourceVersion": "7"}}, "hash-1", ()),  # made again
        (WHERE, LIVE, "hash-2", ()),  # our content changed
        (WHERE, LIVE, "hash-1", ("lifecycle-manager",)),  # checked against other managers
        ((1, "cluster-b", *WHERE[2:]), LIVE, "hash-1", ()),  # another cluster
        ((2, *WHERE[1:]), LIVE, "hash-1", ()),  # another runtime
        (WHERE, {"metadata": {"uid": "u-1"}}, "hash-1", ()),  # no version to go by
    ],
)
def test_given_anything_else_then_compared_again(where, live, digest, managers):
    remember_in_place(WHERE, LIVE, "hash-1", ())
    assert not in_place_as_compared(where, live, digest, managers)


def test_given_no_version_then_nothing_is_remembered():
    where = (3, *WHERE[1:])
    remember_in_place(where, {"metadata": {}}, "hash-1", ())
    assert not in_place_as_compared(where, {"metadata": {}}, "hash-1", ())


@pytest.mark.django_db
def test_given_periodic_no_ops_compared_the_watcher_when_it_is_edited_then_the_next_one_repairs_it(
    new_runtime,
):
    runtime, kyma = new_runtime
    kyma_reconcile_run(kyma.pk)
    module_services.moduleconfig_set_status(
        config=ModuleConfig.objects.get(kyma=kyma), status={"state": "Ready"}
    )
    kyma_reconcile_run(kyma.pk)
    beside(kyma, watcher_last_seen_at=timezone.now())

    def periodic() -> ReconcileRecord:
        since = ReconcileRecord.objects.order_by("-pk").values_list("pk", flat=True).first()
        now = timezone.now()
        queue.flags().claim([kyma.pk], now, now, full=False)
        kyma_reconcile_batch_run([kyma.pk], reason=queue.PERIODIC_REASON)
        return ReconcileRecord.objects.filter(pk__gt=since).get()

    for _ in range(2):  # the second finds each object as the first compared it
        assert periodic().drift_corrected == []
    runtime.patch_as_user("Deployment", "skr-webhook", {"spec": {"replicas": 0}}, "kyma-system")
    runtime.patch_as_user("Secret", "skr-webhook-tls", {"data": {"tls.key": "ZWRpdGVk"}}, "kyma-system")
    corrected = periodic().drift_corrected
    assert sorted(entry["kind"] for entry in corrected) == ["Deployment", "Secret"]
    assert runtime.get_object("Deployment", "skr-webhook", "kyma-system")["spec"]["replicas"] == 1
    assert periodic().drift_corrected == []
