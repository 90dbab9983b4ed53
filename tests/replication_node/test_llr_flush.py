"""The LLR flush of the active copy writes into the database file only generations whose
every transaction it has heard of.  The writer thread rolls in the middle of a batch, before
that batch's transactions reach the overlay: a flush that ran meanwhile, going by the
stream's generation, wrote a generation into the file without the transactions of that
batch, and the digest the next roll wrote for the copies then differed from theirs (a passive
found "diverged" under 20 concurrent moves).  Real files, the writer held in its thread."""

from __future__ import annotations

import asyncio
import threading
import uuid

from replication_node.log.logfile import closed_log_name, verify_closed
from replication_node.passive.replayer import read_batch
from replication_node.storage.database import Database
from tests.cluster_harness import wait_until
from tests.replication_node.helpers import mount, op

SIZE = 64 * 1024


def replayed_digest(copy, through: int) -> str:
    """The content digest of the copy's closed logs 1..through replayed into a new file,
    as a passive copy replays them."""
    logs = copy.paths.logs
    first = verify_closed((logs / closed_log_name(1)).read_bytes(), 1).header
    db = Database.create(
        copy.paths.root / f"replay-{uuid.uuid4().hex}.sqlite",
        database_signature=first.database_signature,
        log_signature=first.log_signature,
    )
    prev = pending = None
    for gen in range(1, through + 1):
        batch = read_batch(
            logs, [gen], prev=prev, log_signature=first.log_signature, pending=pending
        )
        db.apply(batch.transactions, waypoint=gen, committed=gen, last_log_time=batch.close_time)
        prev, pending = batch.last_header, batch.pending
    try:
        return db.content_digest
    finally:
        db.close()


async def test_a_flush_while_a_batch_rolls_waits_for_that_batchs_transactions(tmp_path):
    copy = await mount(tmp_path, log_file_size=SIZE, llr_depth=1)
    writer = copy.stream._file
    original = writer.write_batch
    rolled, go = threading.Event(), threading.Event()

    def held_after_a_roll(work, **kw):
        before = writer.header.generation
        out = original(work, **kw)
        if writer.header.generation != before and not go.is_set():
            rolled.set()
            go.wait(timeout=30)  # the flush runs now, the batch's events not yet delivered
        return out

    writer.write_batch = held_after_a_roll
    # Two commits in one batch: the first fills most of generation 1, the second rolls it.
    commits = asyncio.gather(copy.commit(op(0, size=40_000)), copy.commit(op(1, size=40_000)))
    await wait_until("the writer rolled inside the batch", rolled.is_set, timeout=30)
    await copy._flush_llr()  # what the roll's flush task does, at the worst moment
    mid = copy.flushed_digest  # what the next roll would write for the copies to compare
    go.set()
    await commits
    await copy.roll()
    await copy._flush_llr()
    # Whatever it wrote, the file holds every transaction of each generation it claims,
    # and the digest it gives the copies is theirs as of that generation.
    if mid.generation:
        assert mid.digest == replayed_digest(copy, mid.generation)
    waypoint = copy.db.header.waypoint
    assert waypoint >= 1
    assert copy.db.content_digest == replayed_digest(copy, waypoint)
    assert copy.flushed_digest.generation == waypoint
    assert copy.flushed_digest.digest == replayed_digest(copy, waypoint)
    await copy.dismount()
