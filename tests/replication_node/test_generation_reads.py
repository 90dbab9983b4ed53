"""Each node reads and verifies a closed generation once per stage (issue 49, the 1 MiB LMTP
path): the active's LLR flushes once, a passive's replay once, however many bodies' parts
the generation holds and however many readers of the stage read them (the replay's check of
a large body, then its row's write).  Counted in process, on real files and a real log
stream: every read of a closed generation's file goes through `logfile.read_closed`."""

from __future__ import annotations

import asyncio
import collections
import uuid
from datetime import timedelta

import pytest

from dag_common.clock import ManualClock
from dag_common.store_api import ItemIn
from replication_node.active.mailbox_store import MailboxStore
from replication_node.errors import LogRecordError
from replication_node.log import logfile
from replication_node.log.generation_cache import GenerationCache
from replication_node.log.logfile import RecordType, closed_log_name, verify_closed
from replication_node.log.spanning import IN_PLACE, decode_part
from replication_node.passive import replayer as replayer_module
from replication_node.passive.markers import Markers
from replication_node.passive.replayer import Replayer
from replication_node.storage.database import Database
from tests.cluster_harness import wait_until
from tests.replication_node.helpers import mount

LOG = 64 * 1024


def _body(size: int, seed: str) -> str:
    line = f"{seed} é a line of a large message\r\n"
    return (line * (size // len(line) + 1))[:size]


class Reads:
    """Counts the reads of each closed generation's file (the real reads: they still
    happen)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *modules: object) -> None:
        self.counts: collections.Counter[str] = collections.Counter()
        real = logfile.read_closed

        def read_closed(path):
            self.counts[path.name] += 1
            return real(path)

        for module in modules:
            monkeypatch.setattr(module, "read_closed", read_closed)

    def twice(self) -> dict[str, int]:
        return {name: n for name, n in self.counts.items() if n > 1}


async def _write_large_bodies(tmp_path):
    """An active copy whose log holds two bodies of 1 MiB and more (their parts spanning
    generations, the second's beginning in the first's last generation) and small puts
    between, nothing flushed yet."""
    copy = await mount(tmp_path, log_file_size=LOG, llr_depth=1000)
    store = MailboxStore(copy)
    await store.create_mailbox("m")
    bodies = {"one": _body(IN_PLACE + 5_000, "one"), "two": _body(IN_PLACE + 70_000, "two")}
    for n, (item_id, body) in enumerate(bodies.items()):
        await store.put_items("m", [ItemIn(item_id=item_id, body=body)])
        await store.put_items("m", [ItemIn(item_id=f"small{n}", body=_body(4000, "s"))])
    await copy.roll()
    return copy, bodies


async def test_the_llr_flush_reads_each_generation_once(tmp_path, monkeypatch):
    copy, bodies = await _write_large_bodies(tmp_path)
    reads = Reads(monkeypatch, logfile)
    last = copy.stream.last_closed_generation
    for gen in range(1, last + 1):  # one flush a roll, as the active's rolls run them
        await copy._flush_llr(through=gen)
    assert copy.db.header.waypoint == last
    for item_id, body in bodies.items():
        assert copy.db.item("m", item_id).body == body
    # The generations holding parts were read (the flushes' bodies come from the log), each
    # once: the one the two bodies share, and those two flushes share, too.
    assert reads.counts and not reads.twice()
    assert copy.bodies._flushed.loads == sum(reads.counts.values())
    assert not len(copy.bodies._flushed), "let go of once flushed"
    await copy.dismount()


async def test_a_replay_reads_each_generation_once(tmp_path, monkeypatch):
    copy, bodies = await _write_large_bodies(tmp_path)
    await copy._flush_llr(through=copy.stream.last_closed_generation)
    digest, last = copy.db.content_digest, copy.stream.last_closed_generation
    logs = copy.paths.logs
    await copy.dismount()
    first = verify_closed((logs / closed_log_name(1)).read_bytes(), 1).header
    db = Database.create(
        tmp_path / f"replay-{uuid.uuid4().hex}.sqlite",
        database_signature=first.database_signature,
        log_signature=first.log_signature,
    )
    markers = Markers(last_log_generated=last, last_log_inspected=last)
    markers.copied_times = dict.fromkeys(range(1, last + 1), 0.0)
    clock = ManualClock()
    reads = Reads(monkeypatch, replayer_module)
    replayer = Replayer(
        db=db, log_dir=logs, markers=markers, replay_lag_time=timedelta(0), clock=clock,
        wakeup=asyncio.Event(), after_replay=lambda: None, max_batch=3,
    )  # fmt: skip
    task = asyncio.create_task(replayer.run())

    def replayed() -> bool:
        if task.done():
            task.result()  # its error, if it stopped
        return markers.last_log_replayed >= last

    try:
        await wait_until("replayed", replayed, timeout=60)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert db.content_digest == digest
    for item_id, body in bodies.items():
        assert db.item("m", item_id).body == body
    # Every generation read, in batches of three (a body's parts in the batch before its
    # commit's too): each once, for the read, the large bodies' checks and their rows.
    assert set(reads.counts) == {closed_log_name(g) for g in range(1, last + 1)}
    assert not reads.twice()
    assert not len(replayer._cache), "let go of once replayed"
    db.close()


async def test_a_generation_changed_on_disk_is_read_again(tmp_path):
    # Kept only while the file is the one that was read: one written again under the same
    # name (a restore, a mend: another inode) is read and verified again; the open log is
    # never kept.
    copy, _ = await _write_large_bodies(tmp_path)
    logs = copy.paths.logs
    path = logs / closed_log_name(1)
    cache = GenerationCache()
    loads: list[str] = []

    def load(path=path, gen=1):
        loads.append(path.name)
        return verify_closed(logfile.read_closed(path), gen)

    kept = cache.get(path, load)
    assert cache.get(path, load) is kept and loads == [path.name]
    again = tmp_path / "again.log"
    again.write_bytes(path.read_bytes())
    again.replace(path)
    assert cache.get(path, load) is not kept and len(loads) == 2
    cache.forget_below(2)
    assert not len(cache)

    open_log = logs / logfile.OPEN_LOG_NAME
    opened = cache.get(open_log, lambda: logfile.scan(open_log.read_bytes()))
    assert not opened.closed and not len(cache)
    await copy.dismount()


async def test_a_body_whose_generations_are_let_go_is_read_by_its_records_alone(
    tmp_path, monkeypatch
):
    # Bytes kept for two generations only, bodies spanning seventeen: a body's parts in a
    # generation no longer kept are read each by the position noted when it was verified,
    # and checked (a part damaged since is refused, naming it); no generation read twice.
    copy, bodies = await _write_large_bodies(tmp_path)
    await copy._flush_llr(through=copy.stream.last_closed_generation)
    digest, last = copy.db.content_digest, copy.stream.last_closed_generation
    logs = copy.paths.logs
    await copy.dismount()
    first = verify_closed((logs / closed_log_name(1)).read_bytes(), 1).header

    def replay(cache: GenerationCache) -> Database:
        db = Database.create(
            tmp_path / f"replay-{uuid.uuid4().hex}.sqlite",
            database_signature=first.database_signature,
            log_signature=first.log_signature,
        )
        prev = pending = None
        for start in range(1, last + 1, 3):
            gens = list(range(start, min(start + 3, last + 1)))
            batch = replayer_module.read_batch(
                logs, gens, prev=prev, log_signature=first.log_signature, pending=pending,
                cache=cache,
            )  # fmt: skip
            db.apply(batch.transactions, waypoint=gens[-1], committed=gens[-1],
                     last_log_time=batch.close_time, puts=batch.puts)  # fmt: skip
            prev, pending = batch.last_header, batch.pending
        return db

    reads = Reads(monkeypatch, replayer_module)
    cache = GenerationCache(most=2 * LOG)
    db = replay(cache)
    assert db.content_digest == digest
    for item_id, body in bodies.items():
        assert db.item("m", item_id).body == body
    db.close()
    assert not reads.twice() and cache.records_read > 0

    # A part damaged on disk after its generation was verified and let go of: read alone
    # by its position, its record's CRC32C refuses it.
    target = logs / closed_log_name(5)
    cache = GenerationCache(most=0)  # nothing kept: the positions alone

    def load():
        return verify_closed(logfile.read_closed(target), 5)

    part = next(r for r in load().records if r.type is RecordType.PART)
    blob = decode_part(part)[0]
    assert [r.offset for r in cache.records(target, blob, load)] and cache.loads == 1
    (again,) = cache.records(target, blob, load)[:1]
    assert bytes(again.payload) == part.payload
    assert cache.loads == 1 and cache.records_read >= 1
    with open(target, "r+b") as f:  # in place: the same file, the same size
        f.seek(part.offset + part.size // 2)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(LogRecordError, match="generation 5"):
        cache.records(target, blob, load)
