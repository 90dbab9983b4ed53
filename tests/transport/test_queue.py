"""The transport's queue file: accepted once committed, each message once, the dumpster's
bounds, a redelivery window, and what survives a reopen (a transport killed)."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal

from transport.bodies import FILE_FROM
from transport.messages import MessageIn, Queued, message_format
from transport.queue import CHECKPOINT_BYTES, DELIVERED, POISON, QUEUED, QueueStore

DAY = 86400.0


def _store(tmp_path, *, max_size=10_000_000, max_time=7 * DAY) -> QueueStore:
    return QueueStore(tmp_path / "queue.db", max_dumpster_time=max_time, max_dumpster_size=max_size)


def _message(n: int, *to: str, body: str = "hello") -> Queued:
    return Queued.of(
        MessageIn(message_id=f"<{n}@example>", recipients=list(to or ["alice"]), body=body)
    )


async def test_a_message_is_queued_once_per_recipient_and_once_per_message_id(tmp_path):
    store = _store(tmp_path)
    first = await store.submit(_message(1, "alice", "bob", "alice"), now=10.0)
    assert first.new and [d.recipient for d in first.deliveries] == ["alice", "bob"]
    again = await store.submit(_message(1, "bob", "alice"), now=11.0)
    assert not again.new and again.deliveries == [], "a retry: nothing queued again"
    # The same message for another recipient (an MTA splits a message's recipients over
    # transactions: Postfix's lmtp_destination_recipient_limit) is queued for that one.
    other = await store.submit(_message(1, "carol", "bob"), now=12.0)
    assert other.new and [d.recipient for d in other.deliveries] == ["carol"]
    assert [d.recipient for d in await store.queued()] == ["alice", "bob", "carol"]
    store.close()


async def test_a_queue_file_of_before_gains_the_format_and_its_messages_stay_text(tmp_path):
    import sqlite3

    with sqlite3.connect(tmp_path / "queue.db") as old:  # the schema before issue 49
        old.executescript(
            "CREATE TABLE messages(message_id TEXT PRIMARY KEY, folder TEXT NOT NULL, "
            "subject TEXT NOT NULL, body TEXT NOT NULL, size INTEGER NOT NULL, "
            "submitted REAL NOT NULL);"
            "INSERT INTO messages VALUES ('<old@example>', 'Inbox', 's', 'b', 2, 1.0);"
        )
    store = _store(tmp_path)
    await store.submit(_message(2, "alice"), now=2.0)
    raw = "Subject: =?utf-8?q?Gr=C3=BC=C3=9Fe?=\r\n\r\nbody\r\n"
    mail = MessageIn(message_id="<3@example>", recipients=["alice"], body=raw, format="message")
    await store.submit(Queued.of(mail), now=3.0)
    text, message = [s.item() for s in await store.items(await store.queued())]
    assert set(text) == {"item_id", "folder", "subject", "body"}, "a text item as before"
    assert message["format"] == "message" and message["body"] == raw
    assert "subject" not in message, "a message's subject is the node's to read"
    store.close()
    with sqlite3.connect(tmp_path / "queue.db") as conn:
        rows = dict(conn.execute("SELECT message_id, format FROM messages"))
        (subject,) = conn.execute("SELECT subject FROM messages WHERE message_id='<3@example>'")
    assert rows == {"<old@example>": "text", "<2@example>": "text", "<3@example>": "message"}
    assert subject == ("Grüße",), "the queue shows a message's subject, read from it"


async def test_many_submissions_share_commits(tmp_path):
    store = _store(tmp_path)
    await asyncio.gather(*(store.submit(_message(n), now=1.0) for n in range(200)))
    assert len(await store.queued()) == 200
    assert store.commits < 100, "waiting submissions join one transaction"
    store.close()


async def test_the_writer_checkpoints_the_wal_so_it_starts_over(tmp_path):
    """Bodies kept in their rows, 18 MB one message after another: the writer's own
    checkpoints (one per CHECKPOINT_BYTES) keep the WAL's file near that size.  Every
    message is still in the file."""
    store = _store(tmp_path, max_size=10**9)
    body = "x" * (FILE_FROM - 1000)
    for n in range(300):
        await store.submit(_message(n, body=body), now=1.0)
    assert store.checkpoints >= 300 * len(body) // CHECKPOINT_BYTES - 1
    wal = (tmp_path / "queue.db-wal").stat().st_size
    assert wal < 2 * CHECKPOINT_BYTES, f"the WAL grew to {wal} bytes"
    assert len(await store.queued()) == 300
    store.close()


async def test_delivered_goes_to_the_dumpster_and_redelivery_queues_the_window_again(tmp_path):
    store = _store(tmp_path)
    ids = []
    for n, at in enumerate((100.0, 200.0, 300.0)):
        ids += [d.id for d in (await store.submit(_message(n), now=at)).deliveries]
    for i, at in zip(ids, (100.0, 200.0, 300.0), strict=True):
        await store.delivered([i], "DB1", now=at + 1)
    states, dumpsters = await store.counts()
    assert states[DELIVERED] == 3 and dumpsters[0].database == "DB1"
    again = await store.redeliver("DB1", 150.0, 250.0, now=400.0)
    assert [d.message_id for d in again] == ["<1@example>"]
    assert [d.message_id for d in await store.queued()] == ["<1@example>"]
    assert await store.redeliver("DB2", 0.0, 1e9, now=400.0) == []
    (entry,) = await store.message("<1@example>")
    assert entry.state == QUEUED and entry.redeliveries == 1
    store.close()


async def test_the_dumpster_keeps_within_its_size_oldest_out_first(tmp_path):
    store = _store(tmp_path, max_size=25)
    for n in range(5):
        (d,) = (await store.submit(_message(n, body="x" * 10), now=float(n))).deliveries
        await store.delivered([d.id], "DB1", now=float(n))
    _, (dump,) = await store.counts()
    assert (dump.messages, dump.bytes) == (2, 20)
    assert await store.message("<0@example>") == [], "the message itself is gone with it"
    assert [e.state for e in await store.message("<4@example>")] == [DELIVERED]
    store.close()


async def test_a_poisoned_delivery_stays_with_its_reason(tmp_path):
    store = _store(tmp_path)
    (d,) = (await store.submit(_message(1), now=1.0)).deliveries
    await store.failed(d.id, "DB1: HTTP 404", counts=True)
    await store.poison(d.id, "DB1: HTTP 404 (after 5 tries)")
    assert await store.queued() == []
    (p,) = await store.poisoned()
    assert p.reason == "DB1: HTTP 404 (after 5 tries)" and p.tries == 2
    states, _ = await store.counts()
    assert states[POISON] == 1
    store.close()


def _submit_then_die(path: str, ready) -> None:  # in a child process
    async def go() -> None:
        store = QueueStore(
            __import__("pathlib").Path(path), max_dumpster_time=DAY, max_dumpster_size=10**9
        )
        for n in range(50):
            await store.submit(_message(n), now=1.0)
            ready.put(n)  # acknowledged: committed
        os.kill(os.getpid(), signal.SIGKILL)

    asyncio.run(go())


async def test_every_acknowledged_submission_survives_a_kill_9(tmp_path):
    path = tmp_path / "queue.db"
    ctx = multiprocessing.get_context("spawn")
    acks = ctx.Queue()
    child = ctx.Process(target=_submit_then_die, args=(str(path), acks))
    child.start()
    await asyncio.to_thread(child.join, 60)
    assert child.exitcode == -signal.SIGKILL
    acknowledged = []
    while not acks.empty():
        acknowledged.append(acks.get())
    store = QueueStore(path, max_dumpster_time=DAY, max_dumpster_size=10**9)
    kept = {d.message_id for d in await store.queued()}
    # (the last acknowledgements may not have left the child's queue before the kill)
    assert acknowledged and {f"<{n}@example>" for n in acknowledged} <= kept
    store.close()


async def test_a_redelivered_message_is_queued_as_of_now_and_a_sweep_ages_out_the_rest(tmp_path):
    store = _store(tmp_path)
    for n in range(2):
        (d,) = (await store.submit(_message(n), now=0.0)).deliveries
        await store.delivered([d.id], "DB1", now=float(n))
    (again,) = await store.redeliver("DB1", 0.5, 1.5, now=3 * DAY)
    assert again.queued == 3 * DAY, "its message_expiration counts from the redelivery"
    assert [d.queued for d in await store.queued()] == [3 * DAY]
    assert await store.sweep(now=7 * DAY + 1) == 1, "the other, older than MaxDumpsterTime"
    assert await store.message("<0@example>") == []
    store.close()


async def test_queued_deliveries_hold_no_bodies_and_the_items_read_them_from_the_file(tmp_path):
    """A queue of large messages waiting out a failover costs the transport their ids, not
    their bodies (issue 52): the bodies stay in the file until a delivery is tried."""
    store = _store(tmp_path)
    body = "b" * 1_000_000
    first = await store.submit(_message(1, "alice", "bob", body=body), now=1.0)
    await store.submit(_message(2, "alice", body="é"), now=2.0)
    queued = await store.queued()
    assert all(not hasattr(d, "body") for d in queued)
    assert [d.size for d in queued] == [1_000_000, 1_000_000, 2]
    items = [s.item() for s in await store.items(queued)]
    assert [(i["folder"], i["body"]) for i in items] == [
        ("Inbox", body),
        ("Inbox", body),
        ("Inbox", "é"),
    ]
    assert items[0]["item_id"] == items[1]["item_id"] != items[2]["item_id"]
    assert first.deliveries == queued[:2]
    store.close()


def _mail(n: int, raw: bytes, *to: str) -> Queued:
    return Queued.of_message(
        b"", raw, message_id=f"<{n}@example>", recipients=list(to or ["alice"]), folder="Inbox"
    )


def _files(tmp_path) -> list[str]:
    return sorted(p.name for p in (tmp_path / "queue.db.bodies").iterdir())


async def test_a_large_body_is_a_file_of_its_own_read_back_byte_for_byte(tmp_path):
    """A message of FILE_FROM bytes or more is written once, to its own file, not through
    SQLite's WAL and checkpoint; a retry of it leaves no second file; it is removed once
    its message leaves the dumpster, and only then."""
    store = _store(tmp_path, max_size=1)  # the dumpster keeps the newest message alone
    raw = b"Subject: big\r\n\r\n" + bytes(range(256)) * (3 * FILE_FROM // 256) + b"\r\n"
    (d,) = (await store.submit(_mail(1, raw), now=1.0)).deliveries
    assert not (await store.submit(_mail(1, raw), now=1.5)).new
    assert len(_files(tmp_path)) == 1, "the retry's file is not kept"
    wal = tmp_path / "queue.db-wal"
    assert (tmp_path / "queue.db").stat().st_size + wal.stat().st_size < len(raw)
    (stored,) = await store.items([d])
    assert stored.message() == raw and stored.subject == "big"
    high = sum(1 for b in raw if b >= 0x80)  # each two bytes in the body's UTF-8
    assert stored.format == "message-8bit" and d.size == len("big") + len(raw) + high
    await store.delivered([d.id], "DB1", now=2.0)
    assert len(_files(tmp_path)) == 1, "in the dumpster: kept for a redelivery"
    (again,) = await store.redeliver("DB1", 1.5, 2.5, now=2.6)
    (redelivered,) = await store.items([again])
    assert redelivered.message() == raw, "redelivered as the same bytes"
    await store.delivered([again.id], "DB1", now=2.7)
    (e,) = (await store.submit(_mail(2, b"Subject: s\r\n\r\nsmall\r\n"), now=3.0)).deliveries
    await store.delivered([e.id], "DB1", now=3.0)
    assert _files(tmp_path) == [], "out of the dumpster: its file removed"
    assert await store.message("<1@example>") == []
    store.close()


async def test_a_body_file_no_row_names_is_removed_when_the_queue_opens(tmp_path):
    store = _store(tmp_path)
    raw = b"Subject: kept\r\n\r\n" + b"k" * FILE_FROM
    await store.submit(_mail(1, raw), now=1.0)
    store.close()
    (kept,) = _files(tmp_path)
    (tmp_path / "queue.db.bodies" / "0123abcd.eml").write_bytes(b"a body never committed")
    store = _store(tmp_path)
    assert _files(tmp_path) == [kept]
    (stored,) = await store.items(await store.queued())
    assert stored.message() == raw
    store.close()


def _submit_large_then_die(path: str, ready) -> None:  # in a child process
    async def go() -> None:
        store = QueueStore(
            __import__("pathlib").Path(path), max_dumpster_time=DAY, max_dumpster_size=10**9
        )
        for n in range(20):
            await store.submit(_mail(n, _large(n)), now=1.0)
            ready.put(n)  # acknowledged: committed
        os.kill(os.getpid(), signal.SIGKILL)

    asyncio.run(go())


def _large(n: int) -> bytes:
    return f"Subject: {n}\r\n\r\n".encode() + bytes([65 + n]) * (FILE_FROM + n)


async def test_every_acknowledged_large_body_survives_a_kill_9_byte_for_byte(tmp_path):
    path = tmp_path / "queue.db"
    ctx = multiprocessing.get_context("spawn")
    acks = ctx.Queue()
    child = ctx.Process(target=_submit_large_then_die, args=(str(path), acks))
    child.start()
    await asyncio.to_thread(child.join, 60)
    assert child.exitcode == -signal.SIGKILL
    acknowledged = []
    while not acks.empty():
        acknowledged.append(acks.get())
    store = QueueStore(path, max_dumpster_time=DAY, max_dumpster_size=10**9)
    queued = await store.queued()
    assert acknowledged and {f"<{n}@example>" for n in acknowledged} <= {
        d.message_id for d in queued
    }
    for stored in await store.items(queued):
        n = int(stored.delivery.message_id[1:].split("@")[0])
        assert stored.message() == _large(n)
    assert len(_files(tmp_path)) == len(queued), "no file without its row"
    store.close()


def test_a_messages_format_and_size_are_read_from_its_bytes_without_its_text():
    euro = "€".encode()  # three bytes, cut between two parts and between two slices
    cases = [
        ((b"plain ascii",), "message", 11),
        ((b"a" + euro[:1], euro[1:] + b"b"), "message", 5),
        ((b"x" * ((1 << 20) - 1) + euro, b""), "message", (1 << 20) + 2),
        ((b"caf\xe9",), "message-8bit", 5),
        ((b"\xe2\x82", b"z"), "message-8bit", 5),
    ]
    for parts, fmt, size in cases:
        assert message_format(parts) == (fmt, size), parts
        whole = b"".join(parts)
        codec = "utf-8" if fmt == "message" else "latin-1"
        assert size == len(whole.decode(codec).encode("utf-8"))
