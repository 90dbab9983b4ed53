"""The average copy queue is per caller and per database, over that caller's queries."""

import pytest

from dag_common.clock import ManualClock
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


# ---- the window of time (issue 28: a 30-minute memory of an outage that was over) ----------

SPAN = 180.0


def timed(**kw) -> tuple[CopyQueueAverages, ManualClock]:
    clock = ManualClock()
    return CopyQueueAverages(window=60, span=SPAN, clock=clock, **kw), clock


# (seconds after the first query, queue asked at that moment, average answered)
@pytest.mark.parametrize(
    ("queries", "expected"),
    [
        # the outage: queues of ~100 for 2.5 min, asked every 30 s, then 0
        (
            [(0, 98), (30, 99), (60, 100), (90, 99), (120, 98), (150, 0), (181, 0)],
            (99 + 100 + 99 + 98 + 0 + 0) / 6,  # the query at 0 s left the window
        ),
        # 3 min after the copies recovered the outage is forgotten (a count of 60 queries
        # at this cadence remembered it for 30 min)
        ([(0, 98), (30, 99), (60, 100), (90, 99), (120, 98), (150, 0), (301, 0)], 0.0),
        ([(0, 98), (30, 99), (60, 100), (90, 99), (120, 98), (150, 0), (299, 0)], 98 / 3),
        # inside the window it is the seed's plain average over the queries
        ([(0, 30), (10, 0), (20, 0)], 10.0),
        # a query exactly `span` old still counts; a moment older does not
        ([(0, 30), (SPAN, 0)], 15.0),
        ([(0, 30), (SPAN + 0.001, 0)], 0.0),
    ],
)
async def test_only_the_queries_within_the_window_count(queries, expected):
    avg, clock = timed()
    answered = None
    for at, queue in queries:
        await clock.advance(at - clock.monotonic())
        answered = avg.record("mover", "DB2", {"mbx2": queue})
    assert answered == {"mbx2": pytest.approx(expected)}


async def test_a_copy_whose_samples_all_left_the_window_averages_its_queue_now():
    avg, clock = timed()
    avg.record("mover", "DB2", {"mbx2": 90})
    await clock.advance(SPAN + 1)
    assert avg.current("mover", "DB2", {"mbx2": 4}) == {"mbx2": 4.0}
    assert avg.current("mover", "DB2", {"mbx3": 2}) == {"mbx3": 2.0}  # never sampled


async def test_the_count_still_bounds_each_series():
    clock = ManualClock()
    avg = CopyQueueAverages(window=3, span=SPAN, clock=clock)
    for queue in (300, 0, 0, 3):
        await clock.advance(1)
        answered = avg.record("a", "DB1", {"mbx2": queue})
    assert answered == {"mbx2": 1.0}


# (seconds after the first query, queue), limit → seconds until the average clears
@pytest.mark.parametrize(
    ("queries", "now", "expected"),
    [
        # 98 at 0 s and 30 s, then 0 at 60 s: mean 65.3; it clears once both 98s leave
        # (with only the 0 left), i.e. when the one at 30 s does: 30 + 180 - 60 = 150 s
        ([(0, 98), (30, 98), (60, 0)], 60, 150.0),
        # five zeros after one 60: 60/6 = 10, not under 10; clears when the 60 leaves
        ([(0, 60), (1, 0), (2, 0), (3, 0), (4, 0), (5, 0)], 5, 175.0),
        # already under the limit: nothing to predict (no entry)
        ([(0, 5), (1, 5)], 1, None),
        # the newest query is over the limit too: not predictable by the window alone
        ([(0, 50), (30, 40)], 30, None),
    ],
)
async def test_when_an_average_over_the_limit_falls_under_it(queries, now, expected):
    avg, clock = timed()
    for at, queue in queries:
        await clock.advance(at - clock.monotonic())
        avg.record("mover", "DB2", {"mbx2": queue})
    await clock.advance(now - clock.monotonic())
    clears = avg.clears_in("mover", "DB2", limit=10.0)
    assert clears.get("mbx2") == (pytest.approx(expected) if expected is not None else None)
    if expected is not None:  # and then it does
        await clock.advance(expected + 0.001)
        assert avg.current("mover", "DB2", {"mbx2": 0})["mbx2"] < 10.0
