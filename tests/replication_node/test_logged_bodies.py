"""The LLR overlay holds a staged body as its place in the log, not the body (issue 52): the
active's reads and its LLR flush read it back from its log files, the same bytes, whether the
commit's generation is still open, closed, or written into the database file since.  Real
files, a real log stream."""

from __future__ import annotations

import pytest

from dag_common.clock import SystemClock
from dag_common.items_query import ItemsQuery
from dag_common.mailbox_digest import body_hash, rows_digest
from dag_common.rfc822 import counted_message_bytes
from dag_common.store_api import ItemIn
from replication_node.active.logged_bodies import LogText
from replication_node.active.mailbox_store import MailboxStore
from replication_node.active.truncator import ActiveTruncator
from replication_node.errors import LogRecordError
from replication_node.log.logfile import closed_log_name
from replication_node.storage.body_reads import text_parts
from tests.replication_node.helpers import body_of, mount, text_of

SIZE = 64 * 1024


def _body(size: int, seed: str) -> str:
    line = f"{seed} é line of a large item\r\n"  # not ASCII: its UTF-8 is not its text
    return (line * (size // len(line) + 1))[:size]


async def test_a_staged_body_is_held_in_the_log_and_read_back_by_every_read(tmp_path):
    copy = await mount(tmp_path, log_file_size=SIZE, llr_depth=50)
    store = MailboxStore(copy)
    await store.create_mailbox("m")
    big, small = _body(300_000, "big"), "a small body"
    await store.put_items("m", [ItemIn(item_id="big", body=big)])
    await store.put_items("m", [ItemIn(item_id="small", body=small)])
    await store.move_or_copy_items("m", "Inbox", "Inbox", copy=True, item_ids=["big"])

    # The overlay holds the large body's place, the small one's text (inline in its record).
    _, row = copy.overlay.items[("m", "big")]
    assert row.body == "" and row.body_hash == body_hash(big)
    assert copy.overlay.logged_body("m", "big") is not None
    assert copy.overlay.items[("m", "small")][1].body == small
    assert all(
        op.body == "" for txn in copy.overlay.transactions_through(10**6) for op in txn.ops
        if getattr(op, "item_id", "") == "big"
    )  # fmt: skip

    # ...but its counts: the LLR flush takes the body's SHA-256 from them, not from hashing
    # the bytes it reads back a second time.
    def bigs(txns):
        return [op.body for txn in txns for op in txn.ops if getattr(op, "item_id", "") == "big"]

    (counts,) = bigs(copy.overlay.transactions_through(10**6))
    assert (counts.utf8_size, counts.sha256) == (len(big.encode()), body_hash(big))
    (flushed,) = bigs(copy.bodies.with_bodies(copy.overlay.transactions_through(10**6)))
    # The bytes are not read back here: the flush writes its row from the log a part at a
    # time (`storage/body_parts.py`).
    parts = flushed.take_utf8()
    assert flushed.sha256 == body_hash(big) and parts.size == len(big.encode())
    assert b"".join(parts.parts()) == big.encode()

    # Every read gives the body back: the item, the listing (with and without bodies), the
    # copy's (which names the same place), and the digest.
    assert body_of(copy, "m", "big") == big
    assert copy.item("m", "big").body == "", "no body read"
    listed = {r.item_id: r for r in copy.items_page("m", ItemsQuery(0, 100)).items}
    assert text_of(listed["big"].body) == big and listed["small"].body == small
    (copied,) = [r for r in listed.values() if r.item_id not in ("big", "small")]
    assert text_of(copied.body) == big
    hashes = {
        r.item_id: r.body_hash for r in copy.items_page("m", ItemsQuery(0, 100, bodies=False)).items
    }
    assert hashes["big"] == body_hash(big)
    held = rows_digest("m", copy.digest_rows("m"))
    # The readers that send a body on are given it as a LogText (the batch message read's,
    # the listing's with `blobs`): read a part at a time from the log, checked, when sent.
    _, apart = copy.bodies_apart("m", ["big", "small"])
    assert isinstance(apart["big"][0], LogText) and apart["small"][0] == small
    assert "".join(text_parts(apart["big"][0].parts())) == big
    streamed = {
        r.item_id: r.body for r in copy.items_page("m", ItemsQuery(0, 100), blobs=True).items
    }
    assert isinstance(streamed["big"], LogText) and streamed["small"] == small
    assert b"".join(streamed["big"].parts()) == big.encode()
    assert streamed["big"].head.size == len(big.encode())

    # Rolled (the commit's generation closed) and still held: read from its closed file.
    await copy.roll()
    assert body_of(copy, "m", "big") == big

    # Written into the database file by the LLR flush (read back from the log for it): the
    # same rows, the same digest, nothing left in the overlay.
    await copy._flush_llr(through=copy.stream.last_closed_generation)
    assert not copy.overlay.logged
    assert body_of(copy, "m", "big") == big
    assert copy.db.item("m", copied.item_id).body == big
    assert rows_digest("m", copy.digest_rows("m")) == held
    await copy.dismount()


async def test_a_body_whose_log_is_gone_is_an_error_never_an_empty_body(tmp_path):
    copy = await mount(tmp_path, log_file_size=SIZE, llr_depth=50)
    store = MailboxStore(copy)
    await store.create_mailbox("m")
    await store.put_items("m", [ItemIn(item_id="big", body=_body(300_000, "x"))])
    await copy.roll()
    first = copy.overlay.logged_body("m", "big").ref.id.generation
    (copy.paths.logs / closed_log_name(first)).unlink()  # what the truncator never does
    with pytest.raises(LogRecordError):
        body_of(copy, "m", "big")
    await copy.crash_close()


async def test_a_message_put_again_as_its_bytes_keeps_its_uid_in_the_overlay_and_the_file(
    tmp_path,
):
    # The dumpster redelivering a large message a lossy failover did not lose: carried as
    # its bytes alone (`counted_message_bytes`), compared by hash with the row, whether the
    # row is the overlay's (its body in the log) or the file's (its body in the row).
    copy = await mount(tmp_path, log_file_size=SIZE, llr_depth=50)
    store = MailboxStore(copy)
    await store.create_mailbox("m")
    raw = b"Subject: again\r\n\r\n" + "réponse\r\n".encode() * 40_000

    def put() -> ItemIn:
        body, fmt, _ = counted_message_bytes(bytearray(raw))
        return ItemIn(item_id="msg", body="x").model_copy(
            update={"body": body, "format": fmt, "subject": "again"}
        )

    uid = (await store.put_items("m", [put()])).uid
    assert (await store.put_items("m", [put()])).uid == uid
    await copy.roll()
    await copy._flush_llr(through=copy.stream.last_closed_generation)
    assert copy.db.item("m", "msg").body == raw.decode()
    assert (await store.put_items("m", [put()])).uid == uid
    assert body_of(copy, "m", "msg") == raw.decode()
    await copy.dismount()


async def test_a_flush_that_meets_a_damaged_part_writes_nothing_of_it(tmp_path):
    # The LLR flush writes a staged body into its row a part at a time as it reads them from
    # the log (`storage/body_parts.py`): a generation found damaged after some parts were
    # written fails the flush inside its SQLite transaction, which then writes nothing (no
    # row of zeros, no half body); the overlay keeps the item.
    copy = await mount(tmp_path, log_file_size=SIZE, llr_depth=50)
    store = MailboxStore(copy)
    await store.create_mailbox("m")
    big = _body(300_000, "d")
    await store.put_items("m", [ItemIn(item_id="big", body=big)])
    await copy.roll()
    first = copy.overlay.logged_body("m", "big").ref.id.generation
    damaged = copy.paths.logs / closed_log_name(first + 2)  # parts written before it
    data = bytearray(damaged.read_bytes())
    data[len(data) // 2] ^= 0xFF
    damaged.write_bytes(bytes(data))
    with pytest.raises(LogRecordError):
        await copy._flush_llr(through=copy.stream.last_closed_generation)
    assert copy.db.item("m", "big") is None
    assert copy.overlay.logged_body("m", "big") is not None
    await copy.crash_close()


async def test_a_body_that_does_not_verify_is_never_given_whole(tmp_path):
    # Read a part at a time to be sent on, a body is checked as it comes: each record's
    # CRC32C, the parts' size and CRC32C, and its SHA-256 at the end, the last part held
    # back until then.  A damaged generation is named, and remembered for the status until
    # it reads whole again.
    copy = await mount(tmp_path, log_file_size=SIZE, llr_depth=50)
    store = MailboxStore(copy)
    await store.create_mailbox("m")
    big = _body(300_000, "v")
    await store.put_items("m", [ItemIn(item_id="big", body=big)])
    await copy.roll()
    logged = copy.overlay.logged_body("m", "big")
    bodies = copy.bodies
    given: list[bytes] = []
    with pytest.raises(LogRecordError, match="SHA-256"):
        for part in bodies.checked_parts(logged, "0" * 64):
            given.append(bytes(part))
    assert given and len(b"".join(given)) < len(big.encode())  # never the whole body
    assert bodies.damage_note() is not None
    assert b"".join(bodies.checked_parts(logged, body_hash(big))) == big.encode()

    damaged = copy.paths.logs / closed_log_name(logged.ref.id.generation + 1)
    data = damaged.read_bytes()
    flipped = bytearray(data)
    flipped[len(flipped) // 2] ^= 0xFF
    damaged.write_bytes(bytes(flipped))
    given.clear()
    with pytest.raises(LogRecordError, match="of the log is damaged"):
        for part in bodies.checked_parts(logged, body_hash(big)):
            given.append(bytes(part))
    assert len(b"".join(given)) < len(big.encode())
    note = bodies.damage_note()
    assert note is not None and f"generation {logged.ref.id.generation + 1} " in note
    damaged.write_bytes(data)  # put back: reads whole again
    assert b"".join(bodies.checked_parts(logged, body_hash(big))) == big.encode()
    assert bodies.damage_note() is None
    await copy.crash_close()


async def test_the_truncator_keeps_the_generations_of_a_body_being_sent_on(tmp_path):
    # A slow client reading a body from the log: the LLR flush writes it into its row
    # meanwhile, and nothing else keeps its generations then; the truncator does while it
    # is read (`reading_from`), and deletes them once it is.
    copy = await mount(tmp_path, log_file_size=SIZE, llr_depth=50)
    store = MailboxStore(copy)
    await store.create_mailbox("m")
    big = _body(300_000, "t")
    await store.put_items("m", [ItemIn(item_id="big", body=big)])
    await copy.roll()
    logged = copy.overlay.logged_body("m", "big")
    first = copy.paths.logs / closed_log_name(logged.ref.id.generation)
    truncator = ActiveTruncator(
        database="DB1", logs=copy.paths.logs, clock=SystemClock(),
        header=lambda: copy.merged_header, peer_progress=_no_peers,
        read_hold=copy.bodies.reading_from,
    )  # fmt: skip
    reading = copy.bodies.checked_parts(logged, body_hash(big))
    got = [bytes(next(reading))]
    assert copy.bodies.reading_from() == logged.ref.id.generation
    await copy._flush_llr(through=copy.stream.last_closed_generation)
    assert not copy.overlay.logged
    await truncator.truncate_once([])
    assert first.exists()
    got.extend(bytes(part) for part in reading)
    assert b"".join(got) == big.encode()
    assert copy.bodies.reading_from() is None
    await truncator.truncate_once([])
    assert not first.exists()
    await copy.dismount()


async def _no_peers() -> list:
    return []
