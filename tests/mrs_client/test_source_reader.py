"""Reading the source past a change it cannot read (a damaged row answers 500 to any listing
that reaches it): the pages before it, then the change alone, named by its number."""

from __future__ import annotations

import pytest

from mrs_client.errors import NodeCallError
from mrs_client.source_reader import read_page
from tests.mrs_client.fakes import FakeNodes


def source(n: int = 50) -> FakeNodes:
    nodes = FakeNodes("DB1")
    nodes.fill("DB1", "alice", n)  # m0..m{n-1}, changes 1..n
    return nodes


async def read_all(nodes: FakeNodes, limit: int) -> list[tuple[int, str]]:
    """(change number, item id or "bad") of every change, read as the mover reads."""
    out, since = [], 0
    while True:
        page = await read_page(nodes, "DB1", "alice", since, limit)
        out += [(i.change_number, "bad" if i.unreadable else i.item_id) for i in page.items]
        assert page.last_change_number >= since
        since = page.last_change_number
        if not page.more:
            return out


@pytest.mark.parametrize(
    ("damaged", "limit"),
    [
        ({1}, 17),  # the first change
        ({20}, 17),
        ({20}, 1),
        ({20, 21}, 17),  # two in a row, nothing readable between: found as one
        ({5, 33, 50}, 17),  # the last change
        ({5, 33, 50}, 100),
    ],
)
async def test_every_readable_change_is_read_and_each_damaged_one_named(damaged, limit):
    nodes = source()
    nodes.damaged = {("DB1", cn) for cn in damaged}
    read = await read_all(nodes, limit)
    readable = [(cn, f"m{cn - 1}") for cn in range(1, 51) if cn not in damaged]
    assert [r for r in read if r[1] != "bad"] == readable
    bad = [cn for cn, what in read if what == "bad"]
    if damaged == {20, 21}:
        assert bad == [21], "the listing cannot tell two neighbours apart"
    else:
        assert bad == sorted(damaged)


async def test_a_damaged_change_far_from_the_next_is_found_in_a_few_dozen_reads():
    nodes = source(3)
    db = nodes.dbs["DB1"]
    db.cn = 1_000_000  # the database numbered changes of other mailboxes meanwhile
    nodes.fill("DB1", "alice", 1, first=3)
    nodes.damaged = {("DB1", 3)}
    calls = len(nodes.calls)
    read = await read_all(nodes, 17)
    assert read == [(1, "m0"), (2, "m1"), (3, "bad"), (1_000_001, "m3")]
    assert len(nodes.calls) - calls < 60


async def test_a_passing_500_is_not_taken_for_damage_and_other_failures_are_raised():
    nodes = source(10)
    failures = iter([500, 500])  # the first page, and once more at half its size

    def flaky(method, db, n):
        status = next(failures, None)
        if status is not None:
            raise NodeCallError("HTTP 500: busy", status=status)

    nodes.before.append(flaky)
    assert [what for _, what in await read_all(nodes, 8)] == [f"m{i}" for i in range(10)]

    down = source(10)
    down.damaged = {("DB1", 5)}

    def unavailable(method, db, n):
        if n > 2:
            raise NodeCallError("HTTP 503: storage error", status=503)

    down.before.append(unavailable)
    with pytest.raises(NodeCallError, match="503"):
        await read_all(down, 8)
