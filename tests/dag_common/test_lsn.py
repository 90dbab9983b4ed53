"""`Lsn`'s order, property-based (hypothesis): within one stream incarnation (epoch) a total
order consistent with `==` and `hash`; across epochs no order at all, said loudly, because
where two epochs' streams part is the history's to say (`fork_below`), not the LSNs'."""

from __future__ import annotations

import operator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dag_common.errors import IncomparableLsns
from dag_common.model import Lsn, Position

# Small ranges, so that equal generations and offsets are drawn often.
generations = st.integers(min_value=1, max_value=4)
offsets = st.integers(min_value=0, max_value=3)
epochs = st.integers(min_value=0, max_value=3)
ORDERS = [operator.lt, operator.le, operator.gt, operator.ge]


def lsns(epoch: st.SearchStrategy[int] = epochs) -> st.SearchStrategy[Lsn]:
    """LSNs in the epochs `epoch` draws (0: unknown)."""
    return st.builds(Lsn, generation=generations, offset=offsets, epoch=epoch)


@st.composite
def same_epoch(draw, size: int) -> list[Lsn]:
    """`size` LSNs of one stream incarnation."""
    epoch = draw(epochs)
    return draw(st.lists(lsns(st.just(epoch)), min_size=size, max_size=size))


@given(same_epoch(2))
def test_within_an_epoch_exactly_one_of_lt_eq_gt_holds(pair):
    a, b = pair
    assert [a < b, a == b, a > b].count(True) == 1
    assert (a <= b) == (a < b or a == b)
    assert (a >= b) == (a > b or a == b)
    assert (a < b) == (b > a) and (a <= b) == (b >= a)


@given(same_epoch(2))
def test_within_an_epoch_the_order_is_the_position_in_the_stream(pair):
    a, b = pair
    assert (a < b) == ((a.generation, a.offset) < (b.generation, b.offset))
    assert (a == b) == ((a.generation, a.offset) == (b.generation, b.offset))


@given(same_epoch(3))
def test_within_an_epoch_the_order_is_transitive(triple):
    a, b, c = triple
    if a <= b and b <= c:
        assert a <= c
    if a < b and b < c:
        assert a < c


@given(lsns(), lsns())
def test_no_two_different_lsns_are_each_at_or_below_the_other(a, b):
    """The bug: Lsn(5, epoch=1) <= Lsn(5, epoch=2) and the reverse both held, unequal."""
    try:
        both = a <= b and b <= a
    except IncomparableLsns:
        assert a.epoch != b.epoch
        return
    assert both == (a == b)


@given(lsns(), lsns())
def test_equal_lsns_hash_alike_and_equality_counts_the_epoch(a, b):
    assert (a == b) == ((a.generation, a.offset, a.epoch) == (b.generation, b.offset, b.epoch))
    if a == b:
        assert hash(a) == hash(b)
    assert a == a.model_copy() and Lsn.model_validate(a.model_dump()) == a


@given(lsns(), lsns())
def test_lsns_of_two_epochs_refuse_every_order(a, b):
    if a.epoch == b.epoch:
        return
    for compare in ORDERS:
        with pytest.raises(IncomparableLsns) as raised:
            compare(a, b)
        assert f"epochs {a.epoch} and {b.epoch}" in str(raised.value)
    assert a != b


@given(same_epoch(5), st.randoms(use_true_random=False))
def test_max_min_and_sorted_do_not_depend_on_the_order_given(values, rng):
    shuffled = list(values)
    rng.shuffle(shuffled)
    assert max(shuffled) == max(values) and min(shuffled) == min(values)
    assert sorted(shuffled) == sorted(values)
    assert sorted(values) == sorted(values, key=lambda v: (v.generation, v.offset))


def test_max_of_two_epochs_is_refused_rather_than_picked():
    """max() picked whichever came first: a position of a stream a failover may have lost."""
    old, new = Lsn(generation=5, epoch=1), Lsn(generation=5, epoch=2)
    with pytest.raises(IncomparableLsns, match="epochs 2 and 1"):
        max([old, new])
    with pytest.raises(IncomparableLsns):
        sorted([new, old])
    assert issubclass(IncomparableLsns, TypeError), "sorted()'s usual error for no order"


def test_an_unknown_epoch_is_not_any_epoch():
    with pytest.raises(IncomparableLsns, match="epochs 0 and 3"):
        assert Lsn(generation=2, epoch=0) < Lsn(generation=9, epoch=3)
    assert Lsn(generation=2) < Lsn(generation=9), "two LSNs without an epoch: one stream"


def test_a_position_is_the_stream_order_without_the_epoch():
    """A caller that has shown two epochs share a stream compares `position`s, explicitly."""
    assert Lsn(generation=4, offset=512, epoch=1).position == (4, 512)
    assert Lsn(generation=4, epoch=1).position < Lsn(generation=4, offset=512, epoch=2).position


positions = st.builds(Position, generations, offsets)


@given(positions, positions)
def test_positions_are_ordered_generation_first_consistently_with_eq_and_hash(a, b):
    assert [a < b, a == b, a > b].count(True) == 1
    assert (a < b) == ((a.generation, a.offset) < (b.generation, b.offset))
    if a == b:
        assert hash(a) == hash(b)


@given(lsns())
def test_an_lsn_is_its_position_in_the_stream_of_its_epoch(lsn):
    assert isinstance(lsn.position, Position)
    assert lsn.position.at(lsn.epoch) == lsn


def test_a_position_reads_generation_colon_offset():
    """What log messages name a staged body by (`log.spanning.BlobId`)."""
    assert str(Position(12, 4096)) == "12:4096"
    assert Position(3) == Position(3, 0), "offset 0: the whole generation"


def test_an_lsn_is_not_ordered_against_another_type():
    with pytest.raises(TypeError):
        assert Lsn(generation=1) < (1, 0)  # type: ignore[operator]
    assert Lsn(generation=1) != (1, 0, 0)
