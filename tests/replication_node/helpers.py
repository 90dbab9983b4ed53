"""Small builders shared by the replication_node tests."""

from __future__ import annotations

import contextlib
import random
import sqlite3
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from dag_common.clock import Clock, ManualClock, SystemClock
from dag_common.cluster_store.embedded import EmbeddedClusterStore
from dag_common.config import ClusterConfig
from replication_node.active.copy import ActiveCopy, CopyPaths, OpenLogPublisher
from replication_node.active.logged_bodies import LogText
from replication_node.http.app import build_app
from replication_node.log.files import OS_FILES, LogFiles
from replication_node.log.operations import Operation, PutItem
from replication_node.node import Node
from replication_node.passive.copy import PassiveCopy
from replication_node.passive.settings import PassiveSettings
from replication_node.storage.body_reads import BlobText, text_parts
from replication_node.storage.file_reads import message_body
from replication_node.storage.reader import ItemRow
from tests.cluster_harness import serve_app
from tests.replication_node.share import Share


def text_body(n: int, seed: int = 1) -> str:
    """`n` bytes of text that does not compress to a pattern (a bit flip shows)."""
    return random.Random(seed).randbytes((n + 1) // 2).hex()[:n]


def commit_staged(active, text: str, ref):
    """The commit of item `big` whose body was staged as `ref`."""
    put = PutItem("m", active.next_change_number(), "big", "Inbox", "", text)
    return active.commit([put], staged={0: ref})


def text_of(body: str) -> str:
    """A body as a reader gets it, whole: a `BlobText` (a large body read a part at a time,
    from the file or the active's log) read now."""
    return "".join(text_parts(body.parts())) if isinstance(body, BlobText) else body


def body_of(copy: ActiveCopy, mailbox: str, item_id: str) -> str | None:
    """An item's body as the active's readers that send it read it (`bodies_apart`: the LLR
    overlay's, a part at a time from the log or the file, else the file's row), whole: what
    a test compares (`ActiveCopy.item` reads no body).  None: no such item, or a tombstone."""
    db, held = copy.bodies_apart(mailbox, [item_id])
    if item_id in held:
        stored = held[item_id]
    else:
        with db.reading_apart() as conn:
            stored = message_body(conn, mailbox, item_id)
    return None if stored is None else text_of(stored[0])


def items_as_read(copy: ActiveCopy, mailbox: str) -> list[ItemRow]:
    """`copy.items(mailbox)` with each body the LLR overlay holds in the log (a `LogText`,
    read a part at a time by the readers that send it) read whole (`body_of`): the rows as
    a passive's file holds them, for a test to compare."""
    return [
        row._replace(body=body_of(copy, mailbox, row.item_id))
        if isinstance(row.body, LogText)
        else row
        for row in copy.items(mailbox)
    ]


def op(i: int, size: int = 500) -> list[Operation]:
    """A transaction of one put_item (item i{i}, change number i + 1, a body of `size`)."""
    return [PutItem("m", i + 1, f"i{i}", "Inbox", "", "x" * size)]


async def mount(
    root: Path,
    *,
    name: str = "DB1",
    log_file_size: int = 64 * 1024,
    llr_depth: int = 2,
    clock: Clock | None = None,
    create: bool = True,
    publish_open_log: OpenLogPublisher | None = None,
    change_number_floor: int = 0,
    log_files: LogFiles = OS_FILES,
) -> ActiveCopy:
    """Mount (creating if needed) an active copy under `root`; `log_files`: the file steps
    of its log (a test's disk, `disk.py`)."""
    return await ActiveCopy.mount(
        paths=CopyPaths(root, name),
        log_file_size=log_file_size,
        llr_depth=llr_depth,
        clock=clock or SystemClock(),
        create=create,
        publish_open_log=publish_open_log,
        change_number_floor=change_number_floor,
        log_files=log_files,
    )


def passive(
    share: Share,
    tmp_path: Path,
    *,
    clock: Clock | None = None,
    lag: timedelta = timedelta(0),
    source: Any = None,
    scrub: timedelta | None = None,
    node: str = "p",
    peers: tuple[Any, ...] = (),
    **settings: Any,
) -> PassiveCopy:
    """A passive copy of the share's DB1 (node `node`) under `tmp_path`, pulling from
    `source` (the share's HTTP source unless given); `peers`: the other copies it may ask
    for a generation the active could not give whole; `settings`: its PassiveSettings'
    others."""
    return PassiveCopy(
        settings=PassiveSettings(
            database="DB1",
            node=node,
            site="s",
            activation_preference=2,
            replay_lag_time=lag,
            scrub_interval=scrub,
            **settings,
        ),
        paths=CopyPaths(tmp_path / ("passive" if node == "p" else node) / "DB1", "DB1"),
        source=source or share.source(),
        clock=clock or SystemClock(),
        retry_interval=0.05,
        failed_retry=0.05,
        peers=peers,
    )


def held_for(clock: ManualClock, seconds: float) -> bool:
    """Whether a task (the replayer) sleeps on `clock` for `seconds` from now."""
    return any(abs(left - seconds) < 1 for left in clock.pending_sleeps())


def replayed_through(copy: PassiveCopy, generation: int) -> Callable[[], bool]:
    """A check for `wait_until`: the copy has replayed through `generation`."""
    return lambda: copy.status().last_log_replayed >= generation


class CorruptingWire:
    """The real HTTP source, with the first transfer of one generation damaged on the way."""

    def __init__(self, source: Any, generation: int) -> None:
        self._source = source
        self._generation = generation
        self.damaged = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._source, name)

    async def fetch(self, generation: int) -> bytes:
        data = await self._source.fetch(generation)
        if generation == self._generation and not self.damaged:
            self.damaged += 1
            data = data[:600] + bytes([data[600] ^ 0x01]) + data[601:]
        return data


@contextlib.asynccontextmanager
async def serving_node(
    config: ClusterConfig, root: Path, *, name: str, port: int, token: str
) -> AsyncIterator[tuple[Node, str]]:
    """Node `name` of `config` in this process (its cluster store `root`/cluster.db),
    serving its HTTP API on `port`: the node and its base URL."""
    store = EmbeddedClusterStore(root / "cluster.db")
    node = Node(config=config, name=name, token=token, clock=SystemClock(), cluster_store=store)
    await node.start()
    runner, url = await serve_app(build_app(node), port=port)
    try:
        yield node, url
    finally:
        await runner.cleanup()
        await node.stop()
        store.close()


def damage_middle_pages(path: Path, count: int = 3) -> int:
    """Bytes changed at the start of `count` pages in the middle of the SQLite file at
    `path` (their b-tree page headers), at the file's own page size (its header says it:
    bytes 16-17, 1 for 65536); how many pages the file has."""
    with open(path, "r+b") as f:
        f.seek(16)
        page_size = int.from_bytes(f.read(2), "big")
        page_size = 65536 if page_size == 1 else page_size
        pages = f.seek(0, 2) // page_size
        for page in range(pages // 2, pages // 2 + count):
            f.seek(page * page_size)
            f.write(b"\xff" * 8)
    return pages


def add_item_rows(path: Path, rows: int) -> None:
    """`rows` small items written straight into the database file at `path` (one statement,
    behind the content digest's back: a check run to its end calls the file damaged), to
    make a file whose check takes a while, fast."""
    conn = sqlite3.connect(path)
    conn.execute(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?) "
        "INSERT INTO items (mailbox, item_id, folder, subject, body, size, change_number, "
        "deleted, commit_time) SELECT 'bulk', 'item' || i, 'Inbox', 'subject', "
        "printf('%.*c', 100, 'x'), 100, i, 0, '' FROM n",
        (rows,),
    )
    conn.commit()
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
