"""A worker, once ready, freezes its start-up heap and collects its youngest generation less often
(``controlplane.worker``): reconciles allocate many short-lived objects."""

from __future__ import annotations

import gc

from controlplane.worker import GC_YOUNG_THRESHOLD, _freeze_startup_heap


def test_given_a_ready_worker_then_its_heap_is_frozen_and_young_objects_collected_less_often():
    before = gc.get_threshold()
    try:
        _freeze_startup_heap()
        assert gc.get_freeze_count() > 0
        assert gc.get_threshold() == (GC_YOUNG_THRESHOLD, *before[1:])
        assert GC_YOUNG_THRESHOLD > 700
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
