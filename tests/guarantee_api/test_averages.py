"""The average copy queue is per caller and per database, over that caller's queries."""

import pytest

from guarantee_api.averages import CopyQueueAverages


def test_average_over_the_callers_queries():
    avg = CopyQueueAverages(window=10)
    assert avg.record("mover-a", "DB1", {"mbx2": 30}) == {"mbx2": 30.0}
    assert avg.record("mover-a", "DB1", {"mbx2": 0}) == {"mbx2": 15.0}
    assert avg.record("mover-a", "DB1", {"mbx2": 0}) == {"mbx2": 10.0}


def test_callers_and_databases_are_separate():
    avg = CopyQueueAverages(window=10)
    avg.record("mover-a", "DB1", {"mbx2": 30})
    assert avg.record("mover-b", "DB1", {"mbx2": 0}) == {"mbx2": 0.0}
    assert avg.record("mover-a", "DB2", {"mbx2": 0}) == {"mbx2": 0.0}


def test_window_forgets_old_queries():
    avg = CopyQueueAverages(window=3)
    avg.record("a", "DB1", {"mbx2": 300})
    for _ in range(2):
        avg.record("a", "DB1", {"mbx2": 0})
    assert avg.record("a", "DB1", {"mbx2": 3}) == {"mbx2": 1.0}


def test_least_recently_used_caller_is_evicted():
    avg = CopyQueueAverages(window=10, max_callers=2)
    avg.record("a", "DB1", {"mbx2": 50})
    avg.record("b", "DB1", {"mbx2": 50})
    avg.record("a", "DB1", {"mbx2": 50})  # a is now more recent than b
    avg.record("c", "DB1", {"mbx2": 0})
    assert len(avg) == 2
    assert avg.record("a", "DB1", {"mbx2": 50}) == {"mbx2": 50.0}  # a kept its history
    assert avg.record("b", "DB1", {"mbx2": 0}) == {"mbx2": 0.0}  # b started afresh


def test_bad_sizes_rejected():
    with pytest.raises(ValueError):
        CopyQueueAverages(window=0)
