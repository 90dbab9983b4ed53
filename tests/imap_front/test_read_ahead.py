"""A session's read-ahead across single-message body FETCHes (`read_ahead.ReadAhead`): a run
in the folder's order is read a batch at a time, what it holds is bounded, a step out of the
run lets it all go, and a body is served only for the UID it was listed under."""

from __future__ import annotations

import asyncio

from imap_front.read_ahead import COMMAND, Read, ReadAhead

KEY = ("INBOX", 7, "alice")


def body(n: int) -> bytes:
    return (b"Subject: m%d\r\n\r\n" % n) + bytes([n % 251]) * (100 if n % 5 else 1000)


class Node:
    """The node's reads as the front's node client answers them: many at once (views of one
    answer, up to its byte bound) or one."""

    def __init__(self, listed: dict[int, str]) -> None:
        self.stored = {item: body(uid) for uid, item in listed.items()}
        self.many: list[list[str]] = []
        self.singles: list[str] = []

    async def get_many(self, items: list[str], max_bytes: int) -> dict[str, memoryview | None]:
        self.many.append(list(items))
        await asyncio.sleep(0)
        out: dict[str, memoryview | None] = {}
        size = 0
        for item in items:
            raw = self.stored.get(item)
            out[item] = None if raw is None else memoryview(raw)
            size += len(raw or b"")
            if size >= max_bytes:
                break
        return out

    async def get(self, item: str) -> bytes | None:
        self.singles.append(item)
        return self.stored.get(item)


def listing(n: int) -> dict[int, str]:
    return {uid: f"item{uid}" for uid in range(1, n + 1)}


async def fetch(ahead: ReadAhead, node: Node, listed: dict[int, str], uid: int,
                number: int) -> bytes | None:  # fmt: skip
    """One `UID FETCH uid (BODY.PEEK[])` as `backend._InRun` serves it, command `number`."""
    COMMAND.set(Read(number, True))
    uids = sorted(listed)
    at = uids.index(uid)
    after = uids[at + 1] if at + 1 < len(uids) else None

    def coming(n: int) -> list[tuple[int, str, int]]:
        return [(u, listed[u], len(node.stored[listed[u]])) for u in uids[at : at + n]]

    item = listed[uid]
    source = ahead.source(KEY, uid, item, after, coming, node.get_many, node.get)
    raw = await (node.get if source is None else source.get)(item)
    return None if raw is None else bytes(raw)


def test_a_run_is_read_a_batch_at_a_time_exactly_and_holds_a_bounded_window() -> None:
    listed = listing(400)
    node = Node(listed)
    batch = 2000  # bytes a read asks for: ~10 of these messages

    async def run() -> tuple[list[bytes | None], int, bool]:
        ahead = ReadAhead(window_ids=64, batch_bytes=batch, most=16, ahead=2)
        got, most = [], 0
        for number, uid in enumerate(sorted(listed), start=1):
            COMMAND.set(Read(number, True))
            assert ahead.continues() == (number > 2)  # the run, once it is one
            got.append(await fetch(ahead, node, listed, uid, number))
            bodies = ahead._bodies
            if bodies is not None:
                most = max(most, bodies.held)
        ahead.leave()
        return got, most, ahead.holding

    got, most, holding = asyncio.run(run())
    assert got == [body(uid) for uid in sorted(listed)]  # byte for byte, in order
    # the first body alone (no run yet); the rest a batch of ~10 at a time, not one each
    assert node.singles == ["item1"]
    assert len(node.many) < 400 // 4
    # at most the batch being served and two ahead, each up to a batch and one message
    assert 0 < most <= 3 * (batch + 1000)
    assert not holding


def test_a_step_out_of_the_run_lets_the_window_go_and_reads_alone() -> None:
    listed = listing(100)
    node = Node(listed)

    async def run() -> None:
        ahead = ReadAhead(window_ids=50, batch_bytes=1000, most=8, ahead=2)
        await fetch(ahead, node, listed, 1, 1)
        await fetch(ahead, node, listed, 2, 2)
        assert ahead.holding
        bodies = ahead._bodies
        assert bodies is not None and bodies._pending
        # a UID further on in the window is served from it (a client skipping what it has)
        assert await fetch(ahead, node, listed, 10, 3) == body(10) and ahead.holding
        # out of the window: the window's reads cancelled, its bodies let go, the body read alone
        assert await fetch(ahead, node, listed, 80, 4) == body(80)
        assert not ahead.holding and not bodies._pending and bodies.held == 0
        assert node.singles[-1] == "item80" and not ahead.continues()
        # another folder: no run carried over
        await fetch(ahead, node, listed, 81, 5)
        assert ahead.holding
        COMMAND.set(Read(6, True))
        assert ahead.source(("Sent", 9, "alice"), 42, "item42", 43, lambda n: [],
                            node.get_many, node.get) is None  # fmt: skip
        assert not ahead.holding
        # a command between two of the run (not a FETCH of it): no poll skipped after it
        await fetch(ahead, node, listed, 1, 7)
        await fetch(ahead, node, listed, 2, 8)
        COMMAND.set(Read(10, True))
        assert not ahead.continues()
        # nor when the client had not sent its next command yet
        await fetch(ahead, node, listed, 3, 11)
        COMMAND.set(Read(12, False))
        assert not ahead.continues()

    asyncio.run(run())


def test_a_body_is_served_only_for_the_uid_it_was_listed_under() -> None:
    listed = listing(30)
    node = Node(listed)

    async def run() -> None:
        ahead = ReadAhead(window_ids=30, batch_bytes=100_000, most=30, ahead=1)
        await fetch(ahead, node, listed, 1, 1)
        await fetch(ahead, node, listed, 2, 2)  # the window: UIDs 2-30 as listed then
        # item5 put again with other bytes: UID 5 expunged, item5 listed as UID 31
        node.stored["item5"] = b"Subject: other bytes\r\n\r\nnew"
        moved = {u: i for u, i in listed.items() if u != 5} | {31: "item5"}
        for number, uid in enumerate((3, 4, 6), start=3):
            assert await fetch(ahead, node, moved, uid, number) == body(uid)
        assert await fetch(ahead, node, moved, 31, 6) == b"Subject: other bytes\r\n\r\nnew"
        assert node.singles[-1] == "item5"  # not the window's older bytes

    asyncio.run(run())
