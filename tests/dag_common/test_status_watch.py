"""The pushed-status wire format and its coalescing rule (dag_common.status_watch)."""

from __future__ import annotations

import itertools

import pytest

from dag_common.model import CopyMode, CopyRole, CopyStatus, CopyStatusReport, NodeStatus
from dag_common.status_watch import (
    Changed,
    Coalescer,
    Heartbeat,
    Snapshot,
    WatchProtocolError,
    decode,
    encode,
)


def copy(db: str = "DB1", replayed: int = 5, **kw) -> CopyStatusReport:
    return CopyStatusReport(
        database=db,
        node="mbx2",
        site="redmond",
        role=CopyRole.PASSIVE,
        status=CopyStatus.HEALTHY,
        activation_preference=2,
        last_log_replayed=replayed,
        **kw,
    )


def test_every_kind_goes_through_the_wire_unchanged():
    status = NodeStatus(node="mbx2", site="redmond", copies=[copy(), copy("DB2")])
    for event in (Snapshot(status), Changed((copy(replayed=6),)), Heartbeat()):
        line = encode(event)
        assert line.endswith(b"\n") and line.count(b"\n") == 1
        assert decode(line) == event


@pytest.mark.parametrize(
    ("line", "words"),
    [
        (b"not json\n", "not JSON"),
        (b"[1, 2]\n", "not a JSON object"),
        (b'{"kind": "gossip"}\n', "unknown kind 'gossip'"),
        (b'{"kind": "snapshot"}\n', "without 'status'"),
        (b'{"kind": "copies", "copies": {"a": 1}}\n', "copies is not a list"),
        (b'{"kind": "copies", "copies": [{"database": "DB1"}]}\n', "invalid field(s)"),
        (b'{"kind": "snapshot", "status": {"node": "mbx2"}}\n', "invalid field(s)"),
    ],
)
def test_a_line_that_is_not_whole_and_valid_is_refused(line, words):
    with pytest.raises(WatchProtocolError, match=words.replace("(", r"\(").replace(")", r"\)")):
        decode(line)


def test_a_change_goes_out_at_once_then_at_most_rate_a_second_always_the_newest():
    co = Coalescer(rate=4.0, burst=2)
    co.sent([copy(replayed=1)], now=0.0)
    assert co.due([copy(replayed=1)], now=0.0) == []  # nothing changed
    assert co.due([copy(replayed=2)], now=0.01) == [copy(replayed=2)]
    assert co.due([copy(replayed=3)], now=0.02) == [copy(replayed=3)]  # the burst's second
    # The bucket is empty: held back, then sent as the newest status once a send refills.
    assert co.due([copy(replayed=4)], now=0.03) == []
    assert co.due([copy(replayed=5)], now=0.2) == []
    assert co.due([copy(replayed=6)], now=0.28) == [copy(replayed=6)]
    # Under constant change, sends are spaced by 1/rate.
    sent = [t / 100 for t in range(29, 300) if co.due([copy(replayed=t)], now=t / 100)]
    gaps = [b - a for a, b in itertools.pairwise(sent)]
    assert gaps and all(g >= 0.25 - 1e-9 for g in gaps), gaps


def test_copies_are_coalesced_each_on_its_own():
    co = Coalescer(rate=1.0, burst=1)
    co.sent([copy("DB1"), copy("DB2")], now=0.0)
    assert co.due([copy("DB1", replayed=9), copy("DB2")], now=0.1) == [copy("DB1", replayed=9)]
    # DB1's bucket is empty; DB2's is not.
    assert co.due([copy("DB1", replayed=10), copy("DB2", replayed=9)], now=0.2) == [
        copy("DB2", replayed=9)
    ]


def test_what_moves_with_time_alone_is_no_news_but_a_mode_change_is():
    co = Coalescer()
    active = copy(lease_expires_in=4.9)
    co.sent([active], now=0.0)
    assert co.due([copy(lease_expires_in=3.1)], now=1.0) == []
    moved = copy(lease_expires_in=3.0, copy_mode=CopyMode.BLOCK)
    assert co.due([moved], now=1.1) == [moved]


def test_the_last_state_of_a_burst_goes_out_one_look_after_it_settles():
    """A final sync's writes drain the bucket; the roll's replay that follows is not held a
    refill long: found unchanged at the next look, it goes out then."""
    co = Coalescer(rate=4.0, burst=2)
    co.sent([copy(replayed=1)], now=0.0)
    for i, t in enumerate((0.010, 0.020), start=2):
        assert co.due([copy(replayed=i)], now=t) == [copy(replayed=i)]
    assert co.due([copy(replayed=9)], now=0.030) == []  # held: the bucket is empty
    assert co.due([copy(replayed=9)], now=0.055) == [copy(replayed=9)]  # quiet: out
    assert co.due([copy(replayed=9)], now=0.080) == []  # nothing new
