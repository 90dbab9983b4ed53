"""The ids the active gives items: UUIDv7, increasing within a process, never repeated."""

from __future__ import annotations

import re
import threading
import uuid

from dag_common.api_types import ITEM_ID_PATTERN
from replication_node.active.item_ids import ItemIds, new_item_id


def test_ids_are_uuid7_in_32_hex_digits_that_the_api_accepts():
    item_id = new_item_id()
    assert re.fullmatch(r"[0-9a-f]{32}", item_id)
    assert re.fullmatch(ITEM_ID_PATTERN, item_id)
    parsed = uuid.UUID(item_id)
    assert parsed.version == 7 and parsed.variant == uuid.RFC_4122


def test_ids_follow_each_other_within_a_millisecond_and_across_milliseconds():
    now = [1_800_000_000_000]
    ids = ItemIds(lambda: now[0])
    same_ms = [ids.new() for _ in range(300)]
    now[0] += 1
    next_ms = [ids.new() for _ in range(3)]
    assert same_ms + next_ms == sorted(same_ms + next_ms)
    assert len(set(same_ms + next_ms)) == 303
    assert all(i[:12] == f"{1_800_000_000_000:012x}" for i in same_ms)


def test_a_clock_set_back_or_4096_ids_in_one_millisecond_keep_the_order():
    now = [1_800_000_000_000]
    ids = ItemIds(lambda: now[0])
    given = [ids.new() for _ in range(5000)]  # more than the counter holds
    now[0] -= 60_000  # the clock goes back a minute
    given += [ids.new() for _ in range(10)]
    assert given == sorted(given) and len(set(given)) == len(given)


def test_two_sequences_never_give_the_same_id():
    """Two actives (a failover) at the same millisecond: the random bits differ."""
    a, b = ItemIds(lambda: 1_800_000_000_000), ItemIds(lambda: 1_800_000_000_000)
    assert not {a.new() for _ in range(2000)} & {b.new() for _ in range(2000)}


def test_threads_share_one_order():
    ids = ItemIds()
    out: list[list[str]] = [[] for _ in range(4)]

    def give(mine: list[str]) -> None:
        mine.extend(ids.new() for _ in range(2000))

    threads = [threading.Thread(target=give, args=(mine,)) for mine in out]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    every = [i for mine in out for i in mine]
    assert len(set(every)) == 8000
    assert all(mine == sorted(mine) for mine in out)
