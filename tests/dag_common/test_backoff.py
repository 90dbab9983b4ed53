"""The one backoff (dag_common/backoff.py), pure."""

from __future__ import annotations

import pytest

from dag_common.backoff import Backoff


def test_waits_double_to_the_longest_and_start_again_after_a_success():
    b = Backoff(0.125, 0.75)
    assert [b.next() for _ in range(5)] == [0.125, 0.25, 0.5, 0.75, 0.75]
    assert b.failures == 5
    b.reset()
    assert b.failures == 0 and b.next() == 0.125


def test_the_first_failure_and_every_tenth_are_worth_a_line():
    b = Backoff(1.0, 60.0)
    said = []
    for _ in range(25):
        b.next()
        said.append(b.worth_saying())
    assert [i + 1 for i, s in enumerate(said) if s] == [1, 10, 20]


@pytest.mark.parametrize("first, longest", [(0.0, 1.0), (2.0, 1.0), (-1.0, 5.0)])
def test_a_backoff_that_cannot_wait_is_refused(first, longest):
    with pytest.raises(ValueError):
        Backoff(first, longest)


def test_a_fixed_interval_waits_the_same_and_still_counts_its_failures():
    b = Backoff.fixed(0.5)
    assert [b.next() for _ in range(4)] == [0.5] * 4
    assert b.failures == 4 and b.worth_saying() is False
    b.reset()
    assert b.next() == 0.5 and b.worth_saying()
