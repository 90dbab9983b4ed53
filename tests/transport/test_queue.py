"""The transport's queue file: accepted once committed, each message once, the dumpster's
bounds, a redelivery window, and what survives a reopen (a transport killed)."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal

from transport.messages import MessageIn
from transport.queue import CHECKPOINT_BYTES, DELIVERED, POISON, QUEUED, QueueStore

DAY = 86400.0


def _store(tmp_path, *, max_size=10_000_000, max_time=7 * DAY) -> QueueStore:
    return QueueStore(tmp_path / "queue.db", max_dumpster_time=max_time, max_dumpster_size=max_size)


def _message(n: int, *to: str, body: str = "hello") -> MessageIn:
    return MessageIn(message_id=f"<{n}@example>", recipients=list(to or ["alice"]), body=body)


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
    await store.submit(mail, now=3.0)
    text, message = await store.items(await store.queued())
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
    """Bodies of 48 MiB, one message after another: the writer's own checkpoints (one per
    CHECKPOINT_BYTES) keep the WAL's file near that size; SQLite's own bound alone would let
    it grow to 64 MiB.  Every message is still in the file."""
    store = _store(tmp_path, max_size=10**9)
    body = "x" * (1024 * 1024)
    for n in range(48):
        await store.submit(_message(n, body=body), now=1.0)
    assert store.checkpoints >= 48 // 4 - 1
    wal = (tmp_path / "queue.db-wal").stat().st_size
    assert wal < 2 * CHECKPOINT_BYTES, f"the WAL grew to {wal} bytes"
    assert len(await store.queued()) == 48
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
    items = await store.items(queued)
    assert [(i["folder"], i["body"]) for i in items] == [
        ("Inbox", body),
        ("Inbox", body),
        ("Inbox", "é"),
    ]
    assert items[0]["item_id"] == items[1]["item_id"] != items[2]["item_id"]
    assert first.deliveries == queued[:2]
    store.close()
