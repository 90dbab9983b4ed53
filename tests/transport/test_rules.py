"""The transport's pure rules: what leaves the dumpster, and what follows a failed try."""

from __future__ import annotations

import pytest

from dag_common.api_types import item_id_for
from transport.dumpster import Entry, evicted
from transport.retry import Failure, Next, RetryPolicy, classify, next_try

DAY = 86400.0


@pytest.mark.parametrize(
    ("entries", "now", "max_size", "out"),
    [
        # within both bounds: nothing leaves
        ([(1, 0, 10), (2, 1, 10)], 2, 100, []),
        # over the size: oldest first until the rest fit
        ([(1, 0, 40), (2, 1, 40), (3, 2, 40)], 3, 100, [1]),
        ([(1, 0, 40), (2, 1, 40), (3, 2, 40)], 3, 50, [1, 2]),
        # one message larger than the limit: everything else goes, the newest stays (seeds)
        ([(1, 0, 10), (2, 1, 10), (3, 2, 500)], 3, 100, [1, 2]),
        # older than MaxDumpsterTime: gone whatever the size
        ([(1, 0, 1), (2, 7 * DAY + 5, 1)], 7 * DAY + 10, 100, [1]),
        # both: the old ones by age, then the oldest of the rest by size
        ([(1, 0, 1), (2, 8 * DAY, 60), (3, 8 * DAY + 1, 60)], 8 * DAY + 2, 100, [1, 2]),
        ([], 0, 100, []),
    ],
)
def test_what_leaves_the_dumpster(entries, now, max_size, out):
    total = sum(e[2] for e in entries)
    got = evicted(
        (Entry(*e) for e in entries), total=total, now=now, max_time=7 * DAY, max_size=max_size
    )
    assert got == out


def test_a_dumpster_within_its_bounds_is_read_no_further_than_its_oldest_entry():
    read = []

    def entries():
        for n in range(1000):
            read.append(n)
            yield Entry(n, float(n), 10)

    assert evicted(entries(), total=10_000, now=1000.0, max_time=DAY, max_size=20_000) == []
    assert read == [0, 1], "the oldest, and one to know it is not the newest"


POLICY = RetryPolicy(interval=1.0, max_interval=60.0, expiration=2 * DAY, max_tries=5)


@pytest.mark.parametrize(
    ("status", "moved", "kind"),
    [
        (409, False, Failure.WAIT),  # locked by a move, or a switchover followed too long
        (None, False, Failure.WAIT),  # unreachable, no readable copy, a 5xx
        (503, False, Failure.WAIT),
        (401, False, Failure.WAIT),  # a token being rotated: not the message's fault
        (404, True, Failure.MOVED),
        (404, False, Failure.COUNTS),
        (413, False, Failure.POISON),
        (400, False, Failure.POISON),
    ],
)
def test_how_an_answer_is_sorted(status, moved, kind):
    assert classify(status, directory_moved=moved) is kind


@pytest.mark.parametrize(
    ("failure", "streak", "failures", "waited", "expected"),
    [
        (Failure.WAIT, 1, 0, 0, Next(delay=1.0)),
        (Failure.WAIT, 4, 0, 0, Next(delay=8.0)),
        (Failure.WAIT, 30, 0, 0, Next(delay=60.0)),  # capped
        (Failure.WAIT, 30, 0, 2 * DAY - 10, Next(delay=10.0)),  # never past the expiration
        (Failure.MOVED, 3, 0, 0, Next(delay=0.0)),  # at once, to the new database
        (Failure.COUNTS, 2, 4, 0, Next(delay=2.0)),
        (Failure.COUNTS, 5, 5, 0, Next(poison="x (after 5 tries)")),
        (Failure.POISON, 1, 0, 0, Next(poison="x")),
        (Failure.WAIT, 99, 0, 2 * DAY, Next(poison="expired after 172800 s in the queue; last: x")),
    ],
)
def test_what_follows_a_failed_try(failure, streak, failures, waited, expected):
    got = next_try(POLICY, failure, streak=streak, failures=failures, waited=waited, error="x")
    assert got == expected


def test_a_message_id_names_the_same_item_every_time_and_a_valid_one():
    a = item_id_for("<20261124.1234@mail.example.com>")
    assert a == item_id_for("<20261124.1234@mail.example.com>")
    assert a != item_id_for("<20261124.1235@mail.example.com>")
    assert len(a) <= 64 and a.replace("-", "").isalnum()
