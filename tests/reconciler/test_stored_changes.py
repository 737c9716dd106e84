"""The changes events report travel on the queue mark (their union) to the reconcile, which checks
that the runtime stored them (real store: the database column, or Redis when the broker is)."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from fleet import queue
from fleet.queue.changes import MAX_CHANGES, StoredChange, decode_all
from fleet.queue.marks import FULL
from tests.factories import KymaFactory

pytestmark = pytest.mark.django_db(transaction=True)


def change(rv: str, operation: str = "UPDATE", name: str = "default") -> StoredChange:
    return StoredChange("operator.kyma-project.io/v1beta2", "Kyma", "kyma-system", name, operation, "u-1", rv)


class TestWhenStored:
    def test_an_update_is_stored_once_the_version_moved_or_the_object_went(self):
        update = change("7")
        assert not update.stored({"metadata": {"uid": "u-1", "resourceVersion": "7"}})
        assert update.stored({"metadata": {"uid": "u-1", "resourceVersion": "8"}})
        assert update.stored(None)
        assert update.stored({"metadata": {"uid": "u-2", "resourceVersion": "7"}})  # re-created

    def test_a_create_is_stored_once_the_object_with_its_uid_exists(self):
        create = change("", "CREATE")
        assert not create.stored(None)
        assert not create.stored({"metadata": {"uid": "u-0", "resourceVersion": "3"}})  # an older one
        assert create.stored({"metadata": {"uid": "u-1", "resourceVersion": "3"}})

    def test_a_delete_is_stored_once_the_object_is_gone_or_marked(self):
        delete = change("7", "DELETE")
        assert not delete.stored({"metadata": {"uid": "u-1", "resourceVersion": "7"}})
        assert delete.stored({"metadata": {"uid": "u-1", "resourceVersion": "9"}})  # finalizers: marked
        assert delete.stored(None)

    def test_encoding_round_trips_and_anything_else_is_ignored(self):
        odd = StoredChange("v1", "ConfigMap", "n\nx", 'a"b', "UPDATE", "u", "1")
        assert "\n" not in odd.encode()
        assert decode_all([odd.encode(), "garbage", '["too", "short"]', ""]) == (odd,)


class TestOnTheMark:
    def test_given_events_with_changes_then_one_task_due_now_carries_their_union(self, task_queue, settings):
        settings.LISTENER_RECONCILE_DELAY = 5  # events with a change do not wait for it
        kyma = KymaFactory()
        task_queue()
        asked = timezone.now()
        queued, eta = queue.request_one(kyma.pk, countdown=0, margin=5, change=change("7"))
        assert queued and eta - asked < dt.timedelta(seconds=1)
        assert queue.request_one(kyma.pk, countdown=0, margin=5, change=change("8"))[0] is False
        assert queue.request_one(kyma.pk, countdown=0, margin=5, change=change("7"))[0] is False
        assert len(task_queue()) == 1
        start = queue.start(kyma.pk)
        assert sorted(decode_all(start.changes), key=lambda c: c.old_resource_version) == [
            change("7"),
            change("8"),
        ]
        assert start.not_before is None  # nothing to hold for: the changes are checked instead

    def test_given_a_task_started_then_later_changes_go_with_the_next_mark(self, task_queue):
        kyma = KymaFactory()
        task_queue()
        queue.request_one(kyma.pk, countdown=0, change=change("7"))
        queue.start(kyma.pk)
        assert queue.request_one(kyma.pk, countdown=0, change=change("8"))[0] is True
        assert decode_all(queue.start(kyma.pk).changes) == (change("8"),)
        assert queue.start(kyma.pk).changes == ()

    def test_given_a_bulk_request_queued_first_then_an_events_change_joins_it(self, task_queue):
        kyma = KymaFactory()
        task_queue()
        assert queue.request([kyma.pk], reason="periodic") == [kyma.pk]
        assert queue.request_one(kyma.pk, countdown=0, change=change("7"))[0] is False
        assert decode_all(queue.start(kyma.pk).changes) == (change("7"),)

    def test_given_a_task_that_must_retry_then_its_rearmed_mark_keeps_the_changes(self, task_queue):
        kyma = KymaFactory()
        task_queue()
        queue.request_one(kyma.pk, countdown=0, change=change("7"))
        start = queue.start(kyma.pk)
        assert queue.rearm(kyma.pk, 0.5, not_before=start.not_before, changes=start.changes) is not None
        queue.request_one(kyma.pk, countdown=0, change=change("9"))
        assert {c.old_resource_version for c in decode_all(queue.start(kyma.pk).changes)} == {"7", "9"}

    def test_given_too_many_changes_then_the_rest_fall_back_to_the_delay(self, task_queue):
        kyma = KymaFactory()
        task_queue()
        for n in range(MAX_CHANGES):
            queue.request_one(kyma.pk, countdown=0, margin=0.3, change=change(str(n)))
        asked = timezone.now()
        assert queue.request_one(kyma.pk, countdown=0, margin=0.3, change=change("extra"))[0] is False
        start = queue.start(kyma.pk)
        assert len(decode_all(start.changes)) == MAX_CHANGES
        assert change("extra").encode() not in start.changes
        assert start.not_before >= asked + dt.timedelta(seconds=0.3)
        assert start.full  # it does not know every change: it reads everything

    def test_given_an_event_without_a_change_then_the_task_waits_the_delay_as_before(
        self, task_queue, settings
    ):
        settings.LISTENER_RECONCILE_DELAY = 0.3
        kyma = KymaFactory()
        task_queue()
        asked = timezone.now()
        assert queue.Coverage().request(kyma.pk) is True
        assert queue.queued([kyma.pk]) == {kyma.pk}
        assert queue.request_one(kyma.pk, countdown=0.3)[1] >= asked + dt.timedelta(seconds=0.3)
        start = queue.start(kyma.pk)
        assert start.changes == (FULL,) and start.full  # what changed is unknown: it reads everything


class TestHowMuchToRead:
    """The mark says whether the task must read everything (``Started.full``)."""

    def test_given_only_requests_that_said_what_changed_then_the_task_is_targeted(self, task_queue):
        kyma = KymaFactory()
        task_queue()
        queue.request_one(kyma.pk, countdown=0, change=change("7"))
        assert queue.request([kyma.pk], reason="sync resource s changed", urgent=True, full=False) == [
            kyma.pk
        ]
        queue.request_one(kyma.pk, countdown=0, change=change("8"))
        start = queue.start(kyma.pk)
        assert not start.full and len(decode_all(start.changes)) == 2

    def test_given_a_full_request_joins_a_queued_task_then_it_reads_everything(self, task_queue):
        kyma = KymaFactory()
        task_queue()
        queue.request_one(kyma.pk, countdown=0, change=change("7"))
        assert queue.request([kyma.pk], reason="requested by a user") == []  # joined the queued one
        queue.request([kyma.pk], reason="requested by a user")  # once is enough
        start = queue.start(kyma.pk)
        assert start.full and start.changes.count(FULL) == 1
        assert decode_all(start.changes) == (change("7"),)  # still checked before it reads

    def test_given_a_full_request_first_then_the_mark_stays_full_as_events_join(self, task_queue):
        kyma = KymaFactory()
        task_queue()
        assert queue.request([kyma.pk], reason="requested by a user") == [kyma.pk]
        queue.request_one(kyma.pk, countdown=0, change=change("7"))
        assert queue.start(kyma.pk).full

    def test_given_a_full_task_that_must_retry_then_its_rearmed_mark_stays_full(self, task_queue):
        kyma = KymaFactory()
        task_queue()
        queue.request_one(kyma.pk, countdown=0)
        start = queue.start(kyma.pk)
        assert queue.rearm(kyma.pk, 0.5, not_before=start.not_before, changes=start.changes) is not None
        assert queue.start(kyma.pk).full

    def test_given_no_mark_then_the_task_reads_everything(self, task_queue):
        kyma = KymaFactory()
        task_queue()
        assert queue.start(kyma.pk).full  # redelivered, or its mark expired: what it covers is unknown

    def test_given_full_requests_for_kymas_that_are_gone_then_they_are_skipped(self, task_queue):
        kyma = KymaFactory()
        task_queue()
        queue.request_one(kyma.pk, countdown=0, change=change("7"))
        assert queue.request([kyma.pk, 999_999], reason="requested by a user") in ([], [999_999])
        assert queue.start(kyma.pk).full
